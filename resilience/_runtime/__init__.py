"""The background runtime's shared pieces (private): the timer thread, threads, pools, the one fork hook, closing.

`start_thread` starts every thread of the library and `on_fork_in_child` collects every
module's repair after `os.fork()` (`_threads`); `Pool` is the one thread-pool implementation
(`_pool`: the lease engine's, hedging's and the HTTP senders'); `Closing` is how an owner of background work
stops it. `TIMER_THREAD` runs every `call_later` made outside an event loop on one daemon
thread (`_timers`); the clock (`_time`) schedules on it.
"""
