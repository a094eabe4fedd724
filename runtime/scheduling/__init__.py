"""Scheduling: the one Scheduler every backend uses, its admission limits, and the ordering policies.

``scheduler`` holds :class:`Scheduler`, :class:`Ticket`, :class:`ProgramInfo` and the
:class:`SchedulingPolicy` interface; ``policies`` the policies (fcfs, lpm, app-fifo, certa
gang + SJF + aging); ``admission`` the limits on requests, programs and KV tokens in flight.
"""
