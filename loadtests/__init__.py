"""Locust load tests of the gateway: `locustfile.py` is the file Locust runs."""
