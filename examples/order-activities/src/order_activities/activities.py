"""Order activities, declared once with ``@activity``: Studio lists them under "Orders", the broker
runs them. CheckStock and PriceOrder run inline in the workflow step; ChargeCard runs as its own
Celery task on the ``orders.payments`` queue; AwaitShipment waits for an event."""

from __future__ import annotations

from typing import Any

from broker.activities import Input, Result, Retry, RetryLater, Wait, activity

#: units on hand per SKU and warehouse (a real package would ask its stock service)
STOCK: dict[str, dict[str, int]] = {
    "north": {"SKU-1": 10, "SKU-2": 0},
    "south": {"SKU-1": 2, "SKU-2": 5},
}
PRICES: dict[str, float] = {"SKU-1": 19.5, "SKU-2": 120.0}
COUPONS: dict[str, float] = {"WELCOME10": 0.10}


class PaymentGatewayBusy(Exception):
    """Raised when the payment gateway asks us to come back later."""


@activity(
    "Orders.CheckStock",
    category="Orders",
    display_name="Check stock",
    description="Whether a warehouse holds enough units of a SKU.",
    inputs={
        "sku": Input("The SKU to look up."),
        "quantity": Input("How many units the order needs.", editor="number"),
        "warehouse": Input("Which warehouse to ask.", options=("north", "south")),
    },
    outputs=("available",),
    outcomes=("InStock", "OutOfStock"),
)
def check_stock(sku: str, quantity: int = 1, warehouse: str = "north") -> Result:
    available = STOCK.get(warehouse, {}).get(sku, 0)
    outcome = "InStock" if available >= int(quantity) else "OutOfStock"
    return Result({"available": available}, outcome)


@activity(
    "Orders.PriceOrder",
    category="Orders",
    display_name="Price order",
    description="The order's total, after a coupon.",
    inputs={
        "sku": Input("The SKU to price."),
        "quantity": Input("How many units to price.", editor="number"),
        "coupon": Input("A coupon code, if any."),
    },
    outputs=("total", "currency"),
)
def price_order(sku: str, quantity: int = 1, coupon: str = "") -> dict[str, Any]:
    if sku not in PRICES:
        raise ValueError(f"no price for {sku}")
    total = PRICES[sku] * int(quantity) * (1 - COUPONS.get(coupon.upper(), 0.0))
    return {"total": round(total, 2), "currency": "EUR"}


@activity(
    "Orders.ChargeCard",
    category="Orders",
    display_name="Charge card",
    description="Charge the customer's card (slow I/O: its own Celery task).",
    inputs={
        "card": Input("The card token the shop's front end gave."),
        "details": Input("Anything to attach to the charge.", editor="json"),
    },
    outputs=("charge_id",),
    retry=Retry(max_attempts=3, initial_delay=0.5, max_delay=5, on=(PaymentGatewayBusy,)),
    queue="orders.payments",
    time_limit=30,  # a call the gateway never answers faults after 30 s
)
def charge_card(amount: float, card: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    if card == "tok_declined":
        raise ValueError("the card was declined")
    if card == "tok_busy":
        raise PaymentGatewayBusy("the payment gateway is busy")
    if card == "tok_later":
        raise RetryLater("the payment gateway is warming up", delay=1)
    return {"charge_id": f"ch_{card[-4:]}_{int(float(amount) * 100)}"}


@activity(
    "Orders.AwaitShipment",
    category="Orders",
    display_name="Await shipment",
    description="Wait for the warehouse's ShipmentDispatched event.",
    outputs=("result", "order_number"),
)
def await_shipment(order_number: str) -> Wait:
    return Wait(event="ShipmentDispatched", outputs={"order_number": order_number})
