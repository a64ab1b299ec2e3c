"""The background runtime's shared pieces (private): threads, pools, the one fork hook, closing.

`start_thread` starts every thread of the library and `on_fork_in_child` collects every
module's repair after `os.fork()` (`_threads`); `Pool` is the one thread-pool implementation
(`_pool`: the lease engine's, hedging's and the HTTP senders'); `Closing` is how an owner of background work
stops it. The timer thread still lives beside the clock (`_timers`).
"""
