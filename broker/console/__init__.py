"""The console listener: Elsa Studio, the console pages and the Elsa API under ``/elsa/api``."""
