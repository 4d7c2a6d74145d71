"""Many models on few devices: memory budgets per device, footprints predicted and
measured, placement by best fit, load on demand and eviction of the least recently used.

    inventory.py   the devices, their memory and the budget models may book
    footprint.py   a model instance's bytes: predicted from its files, measured once loaded
    ledger.py      bookings per device, best fit, and which models to evict (pure)
    manager.py     the server's side: loads placed and booked, on demand, with eviction
"""
