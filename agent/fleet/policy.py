"""Guardrails applied in code to every side-effecting tool call, whatever the model says.

Spend caps, spend budgets (agent.fleet.spend), excluded hosts (agent.fleet.steering), instance limits, allowed GPU models, minimum reliability, hourly
rent/destroy limits (a rent vast.ai refused for lack of credit does not count), the credit reserve
(``credit_exhausted``), ownership (only instances an event of ours rented or
adopted may be destroyed, rebooted or have their logs read; our label alone is
enough only with ``policy.destroy_orphans``), and the fleet template: the container image, start command, env
and disk always come from config. A refusal names the rule and the numbers.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from agent.config import Settings
from agent.feedback import credit
from agent.fleet import constraints, contracts, spend, steering
from agent.fleet.block import Block, norm_gpu
from agent.store.log import EventLog
from agent.times import utc_ts


class Policy:
    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self.p = settings.policy
        self.label_base = f"{settings.fleet.label_prefix}{settings.agent_id}-"

    # ------------------------------------------------------------ labels

    def label_for(self, idem_key: str) -> str:
        return f"{self.label_base}{idem_key}"

    def is_our_label(self, label: str | None) -> bool:
        return bool(label) and label.startswith(self.label_base)  # type: ignore[union-attr]

    def key_of(self, label: str | None) -> str | None:
        return label[len(self.label_base):] if self.is_our_label(label) else None  # type: ignore[index]

    # ------------------------------------------------------------ counts from the log

    @staticmethod
    def _since(log: EventLog, hours: float = 1.0) -> str:
        return utc_ts(log.clock() - timedelta(hours=hours))

    def rents_last_hour(self, log: EventLog) -> int:
        """Rent attempts that count against ``max_rents_per_hour`` (``counted_rents_since``: not those vast.ai
        refused, nor one for each outbid)."""
        return log.store.counted_rents_since(self._since(log), self.p.max_rents_per_hour)

    def destroys_last_hour(self, log: EventLog) -> int:
        return log.store.destroys_since(self._since(log))

    # ------------------------------------------------------------ checks

    def check_template(self, args: dict[str, Any]) -> Block | None:
        f = self.s.fleet
        for key, want in (("image", f.image), ("onstart", f.onstart)):
            if key in args and args[key] != want:
                return Block("fleet_template", f"{key} is fixed by config to {want!r}; got {args[key]!r}")
        if "disk_gb" in args and float(args["disk_gb"]) != float(f.disk_gb):
            return Block("fleet_template", f"disk_gb is fixed by config to {f.disk_gb}; got {args['disk_gb']}")
        if "env" in args and args["env"] != f.env:
            return Block("fleet_template", "env is fixed by config")
        return None

    def check_rent(self, offer: Any, fleet_count: int, fleet_dph: float, rents_last_hour: int) -> Block | None:
        """``offer``: a agent.clients.vast.Offer; ``fleet_count``/``fleet_dph``: our live instances."""
        p = self.p
        allowed = {norm_gpu(g) for g in p.allowed_gpus}
        if norm_gpu(offer.gpu_name) not in allowed:
            return Block("allowed_gpus", f"{offer.gpu_name} is not in {', '.join(p.allowed_gpus)}")
        dph = offer.dph_total if offer.dph_total is not None else float("inf")
        if dph > p.max_dph_per_instance:
            return Block("max_dph_per_instance", f"${dph:.3f}/h > ${p.max_dph_per_instance:.2f}/h")
        rel = offer.reliability if offer.reliability is not None else 0.0
        if rel < p.min_reliability:
            return Block("min_reliability", f"{rel:.3f} < {p.min_reliability:.3f}")
        if fleet_count + 1 > p.max_instances:
            return Block("max_instances", f"{fleet_count} running or starting + 1 > {p.max_instances}")
        if fleet_dph + dph > p.max_total_dph + 1e-9:
            return Block("max_total_dph", f"${fleet_dph:.2f}/h + ${dph:.2f}/h > ${p.max_total_dph:.2f}/h")
        if rents_last_hour + 1 > p.max_rents_per_hour:
            return Block("max_rents_per_hour", f"{rents_last_hour} rents in the last hour, limit {p.max_rents_per_hour}")
        return None

    def check_contract(self, offer: Any) -> Block | None:
        """No rent of an offer whose contract ends within ``policy.contract_min_hours``: vast.ai stops the instance
        for good at that date, so it would need replacing almost at once."""
        left = contracts.offer_left(offer)
        if not contracts.too_short(left, self.p):
            return None
        return Block("contract_min_hours", f"offer {offer.id}'s contract {contracts.ends_in(left)}, within "
                     f"policy.contract_min_hours {contracts.hours(self.p)} (vast.ai stops the instance for good at "
                     "its end date); choose an offer that runs longer")

    def check_money_and_host(self, log: EventLog, offer: Any) -> Block | None:
        """Rents on an excluded host (config or log), and rents that would pass a spend budget."""
        block = self.check_credit(credit.known_credit(log))
        if block is not None:
            return block
        x = steering.excluded_hosts(self.s, log).get(offer.host_id) if offer.host_id is not None else None
        if x is not None:
            until = f" until {x.until[:16].replace('T', ' ')} UTC" if x.until else ""
            return Block("excluded_hosts", f"host {offer.host_id} is excluded{until} by {x.by} ({x.source}): "
                         f"{x.reason}; choose an offer on another host")
        m = constraints.excluded_machines(log).get(offer.machine_id) if offer.machine_id is not None else None
        if m is not None:
            until = f" until {m.constraint.until[:16].replace('T', ' ')} UTC" if m.constraint.until else ""
            return Block("excluded_machines", f"machine {offer.machine_id} is excluded{until} by constraint #{m.id} "
                         f"(accepted by {m.decided_by}); choose an offer on another machine")
        dph = offer.dph_total if offer.dph_total is not None else 0.0
        return spend.budget_block(log, self.p, dph)

    def check_credit(self, balance: float | None) -> Block | None:
        """No rent at or below ``policy.credit_reserve``: vast.ai refuses rents (HTTP 402) and stops every
        instance at $0, so a rent there creates nothing or an instance stopped at once."""
        reserve = float(self.p.credit_reserve)
        if balance is None or balance > reserve:
            return None
        return Block("credit_exhausted", f"credit ${balance:,.2f} is at or below policy.credit_reserve "
                     f"${reserve:,.2f}: vast.ai refuses rents (HTTP 402) and stops every instance at $0; no rent "
                     "until the account is topped up (instances stopped for credit are kept and started again "
                     "then)")

    def _reachable(self, label: str | None, owned: bool) -> bool:
        """Ownership comes from the log (an event of ours rented or adopted it). Our label alone is
        enough only when ``policy.destroy_orphans`` lets the agent remove what carries it."""
        return owned or (self.p.destroy_orphans and self.is_our_label(label))

    def _not_ours(self, instance_id: int, label: str | None, what: str) -> Block:
        if self.is_our_label(label):
            return Block("not_ours", f"instance {instance_id} carries our label {label!r} but no event of ours "
                         f"rented or adopted it (an orphan; policy.destroy_orphans is off); only instances "
                         f"this agent rented may be {what}")
        return Block("not_ours", f"instance {instance_id} has label {label!r}, not {self.label_base}*; "
                     f"only instances this agent rented may be {what}")

    def check_destroy(self, instance_id: int, label: str | None, owned: bool, destroys_last_hour: int) -> Block | None:
        """``owned``: an event of ours rented or adopted the instance."""
        if not self._reachable(label, owned):
            return self._not_ours(instance_id, label, "destroyed")
        if destroys_last_hour + 1 > self.p.max_destroys_per_hour:
            return Block("max_destroys_per_hour",
                         f"{destroys_last_hour} destroys in the last hour, limit {self.p.max_destroys_per_hour}")
        return None

    def check_reboot(self, instance_id: int, label: str | None, owned: bool) -> Block | None:
        if not self._reachable(label, owned):
            return self._not_ours(instance_id, label, "rebooted")
        return None

    def check_logs(self, instance_id: int, label: str | None, owned: bool) -> Block | None:
        if not self._reachable(label, owned):
            return self._not_ours(instance_id, label, "read")
        return None
