"""`ChaosShortcuts`: the `add_chaos_*` methods of `ResiliencePipelineBuilder`.

Kept next to the chaos strategies (the builder inherits them) so that each shortcut has the
same explicit signature as its factory, written once beside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Self

from resilience.strategies.chaos._strategy import (
    chaos_behavior_strategy,
    chaos_fault_strategy,
    chaos_latency_strategy,
    chaos_outcome_strategy,
)

if TYPE_CHECKING:
    import datetime as dt
    from collections.abc import Awaitable, Callable

    from resilience._outcome import Outcome
    from resilience._validation import Duration
    from resilience.strategies._base import Strategy, StrategyOptions
    from resilience.strategies.chaos._strategy import (
        BehaviorGeneratorArguments,
        EnabledGeneratorArguments,
        FaultGeneratorArguments,
        InjectionRateGeneratorArguments,
        LatencyGeneratorArguments,
        OnBehaviorInjectedArguments,
        OnFaultInjectedArguments,
        OnLatencyInjectedArguments,
        OnOutcomeInjectedArguments,
        OutcomeGeneratorArguments,
    )

__all__ = ["ChaosShortcuts"]


class ChaosShortcuts:
    """`add_chaos_fault`, `add_chaos_latency`, `add_chaos_outcome`, `add_chaos_behavior`."""

    __slots__ = ()

    if TYPE_CHECKING:

        def add(self, strategy: StrategyOptions | Strategy, /) -> Self: ...

    def add_chaos_fault(
        self,
        *,
        injection_rate: float = 0.001,
        injection_rate_generator: Callable[[InjectionRateGeneratorArguments], float | Awaitable[float]] | None = None,
        fault: Exception | type[Exception] | None = None,
        fault_generator: Callable[[FaultGeneratorArguments], Exception | Awaitable[Exception | None] | None]
        | None = None,
        enabled: bool = True,
        enabled_generator: Callable[[EnabledGeneratorArguments], bool | Awaitable[bool]] | None = None,
        on_fault_injected: Callable[[OnFaultInjectedArguments], object] | None = None,
        name: str = "ChaosFault",
    ) -> Self:
        """`.add(chaos_fault_strategy(...))`: raise a fault for a share of executions."""
        return self.add(
            chaos_fault_strategy(
                injection_rate=injection_rate,
                injection_rate_generator=injection_rate_generator,
                fault=fault,
                fault_generator=fault_generator,
                enabled=enabled,
                enabled_generator=enabled_generator,
                on_fault_injected=on_fault_injected,
                name=name,
            )
        )

    def add_chaos_latency(
        self,
        *,
        latency: Duration,
        latency_generator: (
            Callable[[LatencyGeneratorArguments], float | dt.timedelta | Awaitable[float | dt.timedelta | None] | None]
            | None
        ) = None,
        injection_rate: float = 0.001,
        injection_rate_generator: Callable[[InjectionRateGeneratorArguments], float | Awaitable[float]] | None = None,
        enabled: bool = True,
        enabled_generator: Callable[[EnabledGeneratorArguments], bool | Awaitable[bool]] | None = None,
        on_latency_injected: Callable[[OnLatencyInjectedArguments], object] | None = None,
        name: str = "ChaosLatency",
    ) -> Self:
        """`.add(chaos_latency_strategy(...))`: delay a share of executions."""
        return self.add(
            chaos_latency_strategy(
                latency=latency,
                latency_generator=latency_generator,
                injection_rate=injection_rate,
                injection_rate_generator=injection_rate_generator,
                enabled=enabled,
                enabled_generator=enabled_generator,
                on_latency_injected=on_latency_injected,
                name=name,
            )
        )

    def add_chaos_outcome(
        self,
        *,
        outcome: Outcome[Any] | None = None,
        outcome_generator: (
            Callable[[OutcomeGeneratorArguments], Outcome[Any] | Awaitable[Outcome[Any] | None] | None] | None
        ) = None,
        injection_rate: float = 0.001,
        injection_rate_generator: Callable[[InjectionRateGeneratorArguments], float | Awaitable[float]] | None = None,
        enabled: bool = True,
        enabled_generator: Callable[[EnabledGeneratorArguments], bool | Awaitable[bool]] | None = None,
        on_outcome_injected: Callable[[OnOutcomeInjectedArguments], object] | None = None,
        name: str = "ChaosOutcome",
    ) -> Self:
        """`.add(chaos_outcome_strategy(...))`: replace a share of calls with an outcome."""
        return self.add(
            chaos_outcome_strategy(
                outcome=outcome,
                outcome_generator=outcome_generator,
                injection_rate=injection_rate,
                injection_rate_generator=injection_rate_generator,
                enabled=enabled,
                enabled_generator=enabled_generator,
                on_outcome_injected=on_outcome_injected,
                name=name,
            )
        )

    def add_chaos_behavior(
        self,
        *,
        behavior: Callable[[BehaviorGeneratorArguments], object],
        injection_rate: float = 0.001,
        injection_rate_generator: Callable[[InjectionRateGeneratorArguments], float | Awaitable[float]] | None = None,
        enabled: bool = True,
        enabled_generator: Callable[[EnabledGeneratorArguments], bool | Awaitable[bool]] | None = None,
        on_behavior_injected: Callable[[OnBehaviorInjectedArguments], object] | None = None,
        name: str = "ChaosBehavior",
    ) -> Self:
        """`.add(chaos_behavior_strategy(...))`: run a behavior before a share of calls."""
        return self.add(
            chaos_behavior_strategy(
                behavior=behavior,
                injection_rate=injection_rate,
                injection_rate_generator=injection_rate_generator,
                enabled=enabled,
                enabled_generator=enabled_generator,
                on_behavior_injected=on_behavior_injected,
                name=name,
            )
        )
