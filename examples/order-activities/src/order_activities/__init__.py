"""An example team package: order activities for workflows (``order_activities.activities``)."""
