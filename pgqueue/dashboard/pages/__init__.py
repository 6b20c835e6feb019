"""The dashboard's pages, one module each: ``NAV`` (its entry in the navigation) and ``routes(dash)``.

A new page (queues with pause and limits, schedules, throughput) is a new module here, listed
in :data:`pgqueue.dashboard.app.PAGES`; the navigation shows exactly the pages that exist.
"""
