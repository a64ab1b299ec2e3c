"""The background runtime's shared pieces (private): where threads start, the one fork hook, closing.

`start_thread` starts every thread of the library and `on_fork_in_child` collects every
module's repair after `os.fork()` (`_threads`); `Closing` is how an owner of background work
stops it. The timer thread and the pools still live beside their users (`_timers`,
`_lease/_workers`).
"""
