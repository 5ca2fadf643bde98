"""The mTLS client and admin API and the internal listener (Flask), on the web floor beside the
console; ``broker.wiring.web`` builds their parts. It never imports the console or the wiring."""

from broker.ingress.app import internal_app, public_app

__all__ = ["internal_app", "public_app"]
