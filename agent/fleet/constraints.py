"""Operators' words to enforceable constraints: extraction, proposals, acceptance.

An operator note, a pinned directive or a knowledge edit is advice to the model. What code can enforce in
it (hosts or machines to avoid, GPU models allowed or banned, caps on instances and prices, a minimum
reliability, a pause or a stop to rents, each for a while or open-ended) is extracted here and becomes a
*proposed* constraint (``constraint.proposed``); an operator accepts it (``policy accept N``, or
``say --enforce``) and from then on it binds in code through the same paths ``hosts exclude``,
``policy set`` and ``pause`` use. Whatever gives no constraint stays advice, and the operator is told so.

The grammar only ever tightens: a permission or a negated restriction ("don't avoid host 5", "it's fine
to use 3090s") gives nothing, a cap never widens what is in force when accepted, and a time limit it
cannot read leaves the constraint open-ended (longer, so tighter) rather than short.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from agent.errors import UsageError
from agent.feedback.notes import NOTE_BINDS_HOURS
from agent.fleet import steering
from agent.fleet.block import norm_gpu
from agent.times import parse_duration, parse_operator_time, parse_ts, utc_ts

if TYPE_CHECKING:
    from agent.config import PolicySettings, Settings
    from agent.events import Event
    from agent.store.log import EventLog

# What a constraint restricts. Hosts, machines and banned GPUs carry one value each; allow_gpus a list.
KINDS = ("exclude_host", "exclude_machine", "allow_gpus", "ban_gpus", "max_instances", "max_dph_per_instance",
         "max_total_dph", "max_daily_spend", "max_monthly_spend", "min_reliability", "max_rents_per_hour", "pause")

MAX_RANGE = 20  # a host-id range wider than this is not expanded (it stays advice)


@dataclass(frozen=True)
class Constraint:
    kind: str
    value: Any  # int (host, machine, instances, rents), float ($, share), str (a GPU), list[str] (allowed), True
    until: str | None = None  # a log timestamp; None: until an operator ends it

    def key(self) -> tuple[str, str, str | None]:
        v = ",".join(self.value) if isinstance(self.value, list) else f"{self.value:g}" \
            if isinstance(self.value, float) else str(self.value)
        return self.kind, v, self.until[:16] if self.until else None

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind, "value": self.value}
        if self.until:
            d["until"] = self.until
        return d

    def describe(self) -> str:
        return describe(self.kind, self.value, self.until)


def describe(kind: str, value: Any, until: str | None) -> str:
    """One line an operator and the model read: what the constraint does, and until when."""
    end = f" until {until[:16].replace('T', ' ')} UTC" if until else ""
    if kind == "allow_gpus":
        what = f"allow only GPU models {', '.join(value) if isinstance(value, list) else value}"
    elif kind == "max_rents_per_hour":
        what = "no new rents" if value == 0 else f"at most {value} rents an hour"
    else:
        what = {
            "exclude_host": "exclude host {}",
            "exclude_machine": "exclude machine {}",
            "ban_gpus": "ban GPU model {}",
            "max_instances": "at most {} instances",
            "max_dph_per_instance": "at most ${}/h per instance",
            "max_total_dph": "at most ${}/h for the whole fleet",
            "max_daily_spend": "at most ${} a day",
            "max_monthly_spend": "at most ${} a month",
            "min_reliability": "reliability at least {}",
            "pause": "pause the fleet (no rent, destroy or reboot)",
        }.get(kind, kind + " {}").format(f"{value:g}" if isinstance(value, float) else value)
    return what + end


@dataclass(frozen=True)
class Extraction:
    constraints: tuple[Constraint, ...]
    advice: tuple[str, ...]  # the clauses that gave no constraint, as written
    problems: tuple[str, ...] = field(default=())  # e.g. a time limit not understood (the rule is open-ended)


# ------------------------------------------------------------------ the grammar

_SENTENCE = re.compile(r"(?<=[.!?;])\s+|[\r\n]+|(?<=\D)[.!?;]+(?=\S)|(?<!nothing)(?<!anything)\s+(?=but\s)|(?<!\d)\.(?=\s*$)")

_GPU_TABLE: list[tuple[str, str]] = [
    # (pattern, canonical name as vast.ai writes it); more specific first
    (r"(?:rtx\s*)?6000\s*ada", "RTX 6000Ada"),
    (r"(?:rtx\s*)?a6000", "RTX A6000"),
    (r"(?:rtx\s*)?a5000", "RTX A5000"),
    (r"(?:rtx\s*)?a4000", "RTX A4000"),
    (r"(?:geforce\s*)?(?:rtx\s*)?(?:5090)", "RTX 5090"),
    (r"(?:geforce\s*)?(?:rtx\s*)?4090", "RTX 4090"),
    (r"(?:geforce\s*)?(?:rtx\s*)?4080", "RTX 4080"),
    (r"(?:geforce\s*)?(?:rtx\s*)?4070\s*ti", "RTX 4070 Ti"),
    (r"(?:geforce\s*)?(?:rtx\s*)?4070", "RTX 4070"),
    (r"(?:geforce\s*)?(?:rtx\s*)?3090\s*ti", "RTX 3090 Ti"),
    (r"(?:geforce\s*)?(?:rtx\s*)?3090", "RTX 3090"),
    (r"(?:geforce\s*)?(?:rtx\s*)?3080\s*ti", "RTX 3080 Ti"),
    (r"(?:geforce\s*)?(?:rtx\s*)?3080", "RTX 3080"),
    (r"(?:geforce\s*)?(?:rtx\s*)?3070", "RTX 3070"),
    (r"(?:geforce\s*)?(?:rtx\s*)?3060", "RTX 3060"),
    (r"a100[\s-]*sxm4?", "A100 SXM4"),
    (r"a100[\s-]*pcie", "A100 PCIE"),
    (r"a100", "A100"),
    (r"h100[\s-]*sxm5?", "H100 SXM"),
    (r"h100[\s-]*pcie", "H100 PCIE"),
    (r"h100[\s-]*nvl", "H100 NVL"),
    (r"h100", "H100"),
    (r"h200", "H200"),
    (r"gh200", "GH200"),
    (r"l40s", "L40S"),
    (r"l40", "L40"),
    (r"a40", "A40"),
    (r"a10g?", "A10"),
    (r"l4", "L4"),
    (r"t4", "Tesla T4"),
    (r"v100", "Tesla V100"),
]
_GPU = re.compile("|".join(f"(?P<g{i}>{p})" for i, (p, _) in enumerate(_GPU_TABLE)).join(
    (r"(?<![\w$.])(?:nvidia\s*)?(?:", r")(?:\s*(?:gb|g))?(?:'?s|es)?(?![\w])")), re.I)

_ALLOW = re.compile(r"\b(only|just|exclusively|solely|nothing but|nothing except|stick(?:ing)? (?:to|with)|"
                    r"restrict(?:ed)? (?:it |us |the fleet )?to|limit(?:ed)? (?:it |us |the fleet )?to|"
                    r"keep (?:it |us )?to|stay with|exclusive(?:ly)?|onyl|olny)\b", re.I)
_BAN = re.compile(r"\b(no(?! (?:more than|need|longer|limit|problem|issue))|not?|avoid\w*|ban\w*|block\w*|"
                  r"blacklist\w*|exclud\w*|skip\w*|never|without|drop\w*|stop (?:using|renting)|"
                  r"(?:don'?t|do not|dont) (?:use|rent|touch|take|pick|buy|want)|no more|stay (?:off|away from)|"
                  r"keep (?:off|away from)|steer clear of|get rid of|ditch|deny\w*|forbid\w*|"
                  r"off[- ]limits|not allowed|disallow\w*|evict\w*|kill\w*|remove|purge|quit (?:using|renting))\b",
                  re.I)
_PERMIT = re.compile(
    r"\b((?:don'?t|do not|dont|no need to|never|no longer|stop|quit|not|needn'?t|shouldn'?t) (?:\w+ ){0,3}"
    r"(?:avoid|avoiding|exclud\w*|ban\w*|blacklist\w*|skip\w*|block\w*|worry)|"
    r"(?:fine|ok|okay|alright|allowed|free|good|safe) to (?:use|rent|go|be used)|"
    r"(?:can|may|could) (?:now |again |also |still )?(?:use|rent|go back)|feel free|go ahead|"
    r"un-?ban\w*|un-?block\w*|un-?exclud\w*|white-?list\w*|re-?includ\w*|include again|allow again|"
    r"(?:is|are|'s|'re) (?:fine|ok|okay|good|healthy|back|allowed)(?! only)|lift\w*|resume\w*|unpause\w*|"
    r"back in (?:rotation|service|the pool)|no longer (?:banned|excluded|flaky)|re-?enable\w*|"
    r"(?:is|are) not (?:flaky|bad|broken))\b", re.I)
_HOST_BAD = re.compile(r"\b(avoid\w*|exclud\w*|blacklist\w*|black-list\w*|ban\w*|block\w*|skip\w*|"
                       r"stay (?:off|away from|clear of)|keep (?:off|away from|clear of)|steer clear|"
                       r"stop (?:using|renting)|quit (?:using|renting)|(?:don'?t|do not|dont|never|not) "
                       r"(?:\w+ )?(?:use|rent|touch|go near|put anything)|no (?:more )?(?:rent\w*|instances|jobs|"
                       r"work)|flaky|flakey|broken|bad|unreliable|dodgy|sketchy|faulty|dead|keeps? (?:failing|"
                       r"dying|crashing)|problematic|deny\w*|denylist|blocklist|ignore|drop\w*|evict\w*|"
                       r"off[- ]limits|avoud|aviod|avod|excluse|blacklsit|not allowed|forbid\w*|get rid of|"
                       r"no go|nogo|not on|away from|stay off|off)\b", re.I)
_HOST_WORD = r"(?:hosts?|machines?|mach|hostid|host_ids?|machine_ids?|hots|hsot|hostss|servers?|boxe?s?|nodes?)"
_ID_RUN = re.compile(
    rf"\b(?P<word>{_HOST_WORD})\b(?:\s*(?:ids?|#|no\.?|numbers?|nrs?\.?))?\s*[:#=]?\s*(?P<run>\[?\s*#?\d+"
    r"(?:\s*(?:-|–|to|through|thru)\s*#?\d+)?"
    rf"(?:\s*(?:,|&|/|\+|\band\b|\bor\b|\bplus\b|\bnor\b)?\s*(?:(?:and|or)\s+)?(?:(?:{_HOST_WORD})\s*(?:ids?\s*)?)?"
    r"[:#=]?\s*#?\d+(?:\s*(?:-|–|to|through|thru)\s*#?\d+)?)*\]?)", re.I)
_ID_ITEM = re.compile(rf"(?P<word>{_HOST_WORD})|#?(?P<a>\d+)(?:\s*(?:-|–|to|through|thru)\s*#?(?P<b>\d+))?", re.I)
_BARE_IDS = re.compile(r"(?<![\w$.#/])(\d{5,9})(?![\w%$]|\s*(?:/h|\$|usd|dollars|instances|gpus|hours|h\b|%))",
                       re.I)

_INST = r"(?:of them|instances?|instnaces?|insts?|machines?|boxes|box|gpus?|nodes?|rentals?|servers?|workers?|rigs?|vms?)"
_MAX_INST = [
    re.compile(rf"\b(?:at most|atmost|max(?:imum)?(?: of)?|no more than|not more than|up to|upto|cap(?:ped)?"
               rf"(?: (?:it|the fleet|us|fleet size|instances))?(?: at| to)?|limit(?:ed)?(?: (?:it|the fleet|us))?"
               rf"(?: to)?|keep (?:it|us|the fleet)?\s*(?:to|at)|don'?t (?:go|run) (?:above|over|past|beyond)|"
               rf"do not (?:go|run) (?:above|over|past|beyond)|don'?t exceed|do not exceed|never exceed|"
               rf"never more than|<=|≤)\s*(\d+)\s*(?:running |live |concurrent |active |total |more )?{_INST}\b", re.I),
    re.compile(rf"\b(\d+)\s*(?:running |live |concurrent |active |total )?{_INST}\s*(?:max(?:imum)?|tops|at most|"
               rf"or (?:fewer|less))\b", re.I),
    re.compile(rf"\bmax(?:imum)?[_ ]?(?:{_INST}|fleet(?: size)?)\s*(?:of|to|=|:|is|at)?\s*(\d+)\b", re.I),
    re.compile(rf"\b{_INST}\s*(?::|=|<=|≤)\s*(?:at most|max)?\s*(\d+)\b", re.I),
    re.compile(r"\b(?:fleet(?: size)?|size)\s*(?:at most|max|<=|≤|no (?:bigger|larger) than|capped at|cap at|"
               r"of at most)\s*(\d+)\b", re.I),
    re.compile(rf"\bno more than (\d+)\b(?!\s*(?:\$|usd|dollars|/|per|a day|%))(?!\s*{_INST})", re.I),
]
_STRICT_INST = re.compile(rf"\b(?:under|below|fewer than|less than|<)\s*(\d+)\s*(?:running |live |active )?"
                          rf"{_INST}\b", re.I)
_RANGE_INST = re.compile(rf"\b(?:between\s*)?(\d+)\s*(?:-|–|to|and)\s*(\d+)\s*{_INST}\b", re.I)

_MONEY = r"\$?\s*(\d+(?:\.\d+)?|\.\d+)\s*(?:\$|usd|dollars?|bucks)?"
_PER_HOUR = r"\s*(?:/\s*h(?:r|our)?|(?:per|an|a|/)\s*h(?:ou)?r|ph|dph|/hr|an hour|a hour|per hour|hourly)\b"
_PRICE_CAP = re.compile(rf"(?:\b(?:at most|no more than|not more than|max(?:imum)?(?: of)?|under|below|less than|"
                        rf"cheaper than|nothing (?:over|above|more than|pricier than)|(?:don'?t|do not|never) "
                        rf"(?:pay|spend|go) (?:more than|over|above|past)|up to|upto|cap(?:ped)? (?:\w+ ){{0,2}}(?:at|to)|"
                        rf"limit(?:ed)? to|keep (?:it |spend |spending |costs? |the fleet )?(?:under|below|at)|"
                        rf"not over|not above|budget(?: of| is)?|spend(?:ing)? cap(?: of)?|within|"
                        rf"(?:a|the) ceiling of)|<=|≤|<)\s*{_MONEY}(?:\s*(?:-|–|to)\s*{_MONEY})?{_PER_HOUR}"
                        rf"|(?<![\w.])\$\s*(\d+(?:\.\d+)?|\.\d+){_PER_HOUR}\s*(?:max(?:imum)?|tops|at most|cap|"
                        rf"or (?:less|under|cheaper)|ceiling|limit)\b", re.I)
_PRICE_RANGE = re.compile(rf"(?<![\w.])\$\s*(\d+(?:\.\d+)?|\.\d+)\s*(?:-|–|to)\s*\$?\s*(\d+(?:\.\d+)?|\.\d+)"
                          rf"{_PER_HOUR}", re.I)
_TOTAL = re.compile(r"\b(total|in total|overall|combined|altogether|in all|whole fleet|entire fleet|fleet-?wide|"
                    r"the fleet|fleet spend|burn|burn rate|all instances|all together|for everything|sum)\b", re.I)
_PER_INST = re.compile(r"\b(per (?:instance|gpu|machine|box|node|rental|offer|card)|each|apiece|a piece|"
                       r"an instance|a gpu|a machine|a box|any (?:one )?(?:offer|instance|machine|gpu)|"
                       r"for an? (?:offer|instance|machine|gpu|box)|offers?|single)\b", re.I)
_SPEND_WORD = re.compile(r"\b(spend|spending|budget|costs?|burn)\b", re.I)
_DAILY = re.compile(rf"(?:\b(?:at most|no more than|not more than|max(?:imum)?|under|below|less than|cap(?:ped)? at|"
                    rf"limit(?:ed)? to|keep (?:\w+ )?(?:under|below)|budget(?: of| is)?|don'?t spend more than|"
                    rf"do not spend more than|not over|up to|within)\s*{_MONEY}\s*(?:(?:a|per|/|each)\s*"
                    rf"(?P<u1>day|month)|(?P<u2>daily|monthly))\b)|(?:\b(?P<u3>daily|monthly)\s*(?:spend|budget|"
                    rf"cap|limit|spending)?\s*(?:cap|limit|max|budget|of|to|at|under|below|:|=)+\s*{_MONEY})", re.I)
_RELIABILITY = re.compile(
    r"\b(?:reliability|reliable|rel|reliabilty|reliablity)\b[^.;,\d]{0,30}?(?:at least|atleast|min(?:imum)?|above|over|"
    r"of|>=|≥|>|no (?:less|lower) than|not below|\s)\s*(\d+(?:\.\d+)?)\s*(%|percent)?"
    r"|\b(?:at least|min(?:imum)?|above|over|>=|≥|no less than)\s*(\d+(?:\.\d+)?)\s*(%|percent)?\s*(?:reliab\w*|rel\b)",
    re.I)
_PAUSE = re.compile(r"\b(pause|paus|freeze|halt|hands off|stop (?:all|everything)|stop the fleet|put (?:\w+ ){0,3}on "
                    r"hold|hold (?:everything|all|off on everything)|do nothing|don'?t touch anything|"
                    r"no (?:changes|actions)|stand down)\b", re.I)
_NO_PAUSE = re.compile(r"\b((?:don'?t|do not|dont|no need to|never|no) (?:\w+ )?(?:pause|paus|freeze|halt)|unpause\w*|"
                       r"resume\w*|un-?freeze|no pause|not pause|end the pause|lift the pause)\b", re.I)
_NO_RENTS = re.compile(r"\b(stop renting|no new (?:rent\w*|instances|machines|boxes)|no more (?:rent\w*|instances|"
                       r"machines)|(?:don'?t|do not|dont) rent (?:anything|any more|anymore|more|new)|"
                       r"hold off (?:on )?(?:rent\w*|new rent\w*|new instances|scaling up|buying)|freeze (?:rent\w*|scaling)|"
                       r"stop scaling up|no scaling up|don'?t scale up|do not scale up|no new rentals)\b", re.I)
_UNTIL = re.compile(r"\b(?:until|till|til|untill|untl|up until|through|thru|before)\s+(?P<t>[^,;]+?)"
                    r"(?=\s*(?:$|[,;(]|:(?!\d)|\band\b|\bthen\b|\bor\b|\bbecause\b|\bsince\b|\bplease\b|\bpls\b|\bplz\b|\bas\b|"
                    r"\bwhile\b|\bwhen\b|\bafter\b|\bso\b))", re.I)
_FOR = re.compile(r"\b(?:for|during|over)\s+(?:the\s+)?(?:next\s+|coming\s+|following\s+)?(?P<n>\d+(?:\.\d+)?|an?|one|two|"
                  r"three|four|five|six|seven|eight|nine|ten|twelve|twenty-?four|a couple(?: of)?|couple(?: of)?|"
                  r"half an?)\s*(?P<u>ms|s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?|d|days?|w|wks?|weeks?)\b",
                  re.I)
_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
          "nine": 9, "ten": 10, "twelve": 12, "twentyfour": 24, "twenty-four": 24, "a couple": 2, "a couple of": 2,
          "couple": 2, "couple of": 2, "half a": 0.5, "half an": 0.5}
_TODAY = re.compile(r"\b(?:(?:for )?(?:the rest of )?today|today only|just today|rest of (?:the )?day|for the day|"
                    r"(?:until|till|til) (?:the )?end of (?:the )?day|(?:until|till|til) eod|for tonight|tonight)\b",
                    re.I)
_WEEK = re.compile(r"\b(?:(?:for )?(?:the rest of )?this week|rest of (?:the )?week|this week only|(?:until|till|til) "
                   r"(?:the )?end of (?:the )?week|(?:until|till|til) eow|for the week)\b", re.I)
_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DAY_ABBR = {"mon": 0, "tue": 1, "tues": 1, "wed": 2, "thu": 3, "thur": 3, "thurs": 3, "fri": 4, "sat": 5, "sun": 6}


def _day_start(now: datetime) -> datetime:
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def parse_until(text: str, now: datetime) -> datetime | None:
    """The end of a constraint an operator wrote after "until" (future, UTC): a weekday ("Friday": its
    00:00 UTC, next week's when today is that day), "tomorrow", "tonight"/"midnight", "noon", "the weekend",
    "end of the week", "next week", or what ``agent.times.parse_operator_time`` reads (an ISO date or time,
    a clock time: the next one to come). None when it is none of these."""
    t = " ".join(re.sub(r"[.!?]+$", "", text.strip().lower()).split())
    t = re.sub(r"^(?:the |this |next |coming |)(?=\w)", "", t) if not t.startswith("next week") else t
    t = re.sub(r"\b(?:utc|morning|at the earliest|at least|or so|please|pls|plz)\b", "", t).strip()
    start = _day_start(now)
    tomorrow = re.fullmatch(r"(?:tomorrow|tmrw|tomorow|tommorow)\s*(?:at\s+)?(.+)|(.+?)\s*(?:tomorrow|tmrw|tomorow|"
                            r"tommorow)", t)
    if tomorrow:
        try:
            return parse_operator_time(f"today {tomorrow.group(1) or tomorrow.group(2)}", now) + timedelta(days=1)
        except UsageError:
            return None
    if t in ("tomorrow", "tmrw", "tmr", "tomorow", "tommorow", "tommorrow"):
        return start + timedelta(days=1)
    if t in ("tonight", "midnight", "end of day", "end of the day", "eod", "end of today", "later today"):
        return start + timedelta(days=1)
    if t == "noon":
        return start + timedelta(hours=12) if now.hour < 12 else start + timedelta(days=1, hours=12)
    if t in ("weekend", "week end", "saturday", "sat"):
        return start + timedelta(days=(5 - now.weekday() - 1) % 7 + 1)
    if t in ("end of week", "end of the week", "eow", "next week", "week is over", "monday", "mon"):
        return start + timedelta(days=(0 - now.weekday() - 1) % 7 + 1)
    day = _DAYS.index(t) if t in _DAYS else _DAY_ABBR.get(t)
    if day is None and t.endswith("s") and t[:-1] in _DAYS:
        day = _DAYS.index(t[:-1])
    if day is not None:
        return start + timedelta(days=(day - now.weekday() - 1) % 7 + 1)
    if not t or not (t[0].isdigit()):
        return None
    try:
        when = parse_operator_time(t, now)
    except UsageError:
        return None
    if re.fullmatch(r"\d{1,2}(?::\d{2})?\s*(?:am|pm|a\.m\.|p\.m\.)?", t) and when <= now:
        when += timedelta(days=1)  # a clock time already past today: the next one
    return when if when > now else None


def _time_limit(clause: str, now: datetime) -> tuple[datetime | None, str | None]:
    """The end a clause gives its constraints (the latest, when it gives several) and a problem to report
    when it names one this cannot read (the constraint then stays open-ended)."""
    ends: list[datetime] = []
    problem = None
    if _TODAY.search(clause):
        ends.append(_day_start(now) + timedelta(days=1))
    if _WEEK.search(clause):
        ends.append(_day_start(now) + timedelta(days=(0 - now.weekday() - 1) % 7 + 1))
    for m in _FOR.finditer(clause):
        n = m.group("n").lower().replace("-", "")
        amount = float(n) if n[0].isdigit() else _WORDS.get(m.group("n").lower(), 1)
        try:
            ends.append(now + parse_duration(f"{amount:g}{m.group('u').lower()}"))
        except UsageError:
            problem = f"time limit {m.group(0)!r} not understood"
    for m in _UNTIL.finditer(clause):
        if re.match(r"(?:the )?end of (?:the )?(?:day|week)|eo[dw]\b", m.group("t"), re.I):
            continue
        end = parse_until(m.group("t"), now)
        if end is None:
            problem = f"time limit {m.group(0).strip()!r} not understood; the rule stays until you end it"
            return None, problem
        ends.append(end)
    return (max(ends) if ends else None), problem


def _clauses(text: str) -> list[str]:
    parts = [p.strip(" \t-*•>") for p in _SENTENCE.split(text)]
    return [p for p in parts if p and re.search(r"\w", p)]


def _segments(clause: str) -> list[str]:
    """A clause cut where a list of GPU models may change polarity ("only 4090s, no 3090s")."""
    return [s for s in re.split(r",\s*|\s+(?:and|(?<!nothing)(?<!anything) but|&|while|plus|also|then)\s+|\s+-\s+|;\s*|\(|\)", clause,
                                flags=re.I) if s and s.strip()]


def _gpus_in(segment: str) -> list[str]:
    out: list[str] = []
    for m in _GPU.finditer(segment):
        for i, (_, name) in enumerate(_GPU_TABLE):
            if m.group(f"g{i}"):
                if name not in out:
                    out.append(name)
                break
    return out


def _hosts_in(clause: str) -> tuple[list[int], list[int]]:
    """Host ids and machine ids named in a clause: after host/machine words, in lists and ranges, and bare
    ids of five or more digits."""
    hosts: list[int] = []
    machines: list[int] = []
    spans: list[tuple[int, int]] = []
    for m in _ID_RUN.finditer(clause):
        spans.append(m.span())
        machine = m.group("word").lower().startswith("mach")
        for it in _ID_ITEM.finditer(m.group("word") + " " + m.group("run")):
            if it.group("word"):
                machine = it.group("word").lower().startswith("mach")
                continue
            a, b = int(it.group("a")), it.group("b")
            ids = [a] if b is None else list(range(a, int(b) + 1)) if 0 <= int(b) - a <= MAX_RANGE else []
            for i in ids:
                (machines if machine else hosts).append(i)
    for m in _BARE_IDS.finditer(clause):
        if not any(s <= m.start() < e for s, e in spans):
            hosts.append(int(m.group(1)))
    return list(dict.fromkeys(hosts)), list(dict.fromkeys(machines))


def _strip_numbers(clause: str) -> str:
    """The clause without host-id runs (so "host 4090" is no GPU and "host 67568" no cap)."""
    return _ID_RUN.sub(" ", clause)


_TOPIC = {"exclude_host": "host", "exclude_machine": "host", "allow_gpus": "gpu", "ban_gpus": "gpu",
          "max_instances": "inst", "max_dph_per_instance": "money", "max_total_dph": "money",
          "max_daily_spend": "money", "max_monthly_spend": "money", "min_reliability": "rel", "pause": "pause",
          "max_rents_per_hour": "rents"}


def _topics(segment: str, ids: set[int]) -> set[str]:
    """What a piece of a clause speaks of (hosts, GPU models, instance counts, money, reliability, pause)."""
    out = set()
    if _ID_RUN.search(segment) or ids & {int(n) for n in re.findall(r"\d+", segment)}:
        out.add("host")
    if _gpus_in(_strip_numbers(segment)):
        out.add("gpu")
    if re.search(rf"\b{_INST}\b", segment, re.I) and not re.search(r"\b(?:new|more) (?:instances|machines)", segment,
                                                                     re.I):
        out.add("inst")
    if re.search(r"\$|/\s*h\b|per hour|usd|dollars|budget|spend", segment, re.I):
        out.add("money")
    if re.search(r"reliab", segment, re.I):
        out.add("rel")
    if _PAUSE.search(segment):
        out.add("pause")
    if _NO_RENTS.search(segment):
        out.add("rents")
    return out


def _clause_constraints(clause: str, now: datetime) -> tuple[list[Constraint], str | None]:
    found, problem = _clause_rules(clause, now)
    if len({_TOPIC[c.kind] for c in found}) < 2:
        return found, problem
    # Several kinds of rule in one clause: a time limit binds the rules its own part speaks of ("no 3090s and
    # max 4 instances until Friday": the cap ends Friday, the ban does not); rules a time limit does not
    # reach stay open-ended, which is never looser than what was meant.
    ids = {int(c.value) for c in found if c.kind in ("exclude_host", "exclude_machine")}
    timed: set[str] = set()
    for seg in _segments(clause):
        if _time_limit(seg, now)[0] is not None:
            timed |= _topics(seg, ids) or set(_TOPIC.values())
    return [c if _TOPIC[c.kind] in timed else Constraint(c.kind, c.value, None) for c in found], problem


def _clause_rules(clause: str, now: datetime) -> tuple[list[Constraint], str | None]:
    until_dt, problem = _time_limit(clause, now)
    until = utc_ts(until_dt) if until_dt else None
    out: list[Constraint] = []
    permit = _PERMIT.search(clause)
    hosts, machines = _hosts_in(clause)
    # a permission about GPU models beside a host list ("avoid host 5, 3090s are fine") leaves the hosts alone
    host_part = ", ".join(s for s in clause.split(",") if not (_PERMIT.search(s) and _gpus_in(s) and
                                                             not _ID_RUN.search(s)))
    if (hosts or machines) and _HOST_BAD.search(_strip_numbers(host_part)) and not _PERMIT.search(host_part):
        out += [Constraint("exclude_host", h, until) for h in hosts]
        out += [Constraint("exclude_machine", m, until) for m in machines]
    rest = _strip_numbers(clause)
    polarity: str | None = None
    allowed: list[str] = []
    for seg in _segments(rest):
        gpus = _gpus_in(seg)
        seg_wo = _GPU.sub(" GPU ", seg)
        if _PERMIT.search(seg) and not _ALLOW.search(seg_wo):
            polarity = "permit"
        elif _ALLOW.search(seg_wo):
            polarity = "allow"
        elif _BAN.search(seg_wo):
            polarity = "ban"
        if not gpus:
            continue
        if polarity == "allow":
            allowed += [g for g in gpus if g not in allowed]
        elif polarity == "ban":
            out += [Constraint("ban_gpus", g, until) for g in gpus]
    if allowed and not (permit and not _ALLOW.search(clause)):
        out.append(Constraint("allow_gpus", allowed, until))
    out += _caps(rest, until, permit is not None)
    if _PAUSE.search(rest) and not _NO_PAUSE.search(rest):
        out.append(Constraint("pause", True, until))
    elif _NO_RENTS.search(rest) and not _NO_PAUSE.search(rest) and not out and not _gpus_in(rest):
        out.append(Constraint("max_rents_per_hour", 0, until))
    return out, problem


def _caps(clause: str, until: str | None, permit: bool) -> list[Constraint]:
    out: list[Constraint] = []
    text = _GPU.sub(" GPU ", clause)
    caps: list[int] = []
    for rx in _MAX_INST:
        caps += [int(m.group(1)) for m in rx.finditer(text)]
    caps += [max(0, int(m.group(1)) - 1) for m in _STRICT_INST.finditer(text)]
    caps += [max(int(m.group(1)), int(m.group(2))) for m in _RANGE_INST.finditer(text)
             if not re.search(r"\b(?:at least|min(?:imum)?)\b", text[:m.start()], re.I)]
    if caps:
        out.append(Constraint("max_instances", min(caps), until))
    for m in _DAILY.finditer(clause):
        unit = (m.group("u1") or m.group("u2") or m.group("u3") or "").lower()
        amount = next(float(g) for g in (m.group(i) for i in (1, 5)) if g is not None)
        kind = "max_monthly_spend" if unit.startswith("month") else "max_daily_spend"
        out.append(Constraint(kind, amount, until))
    prices: list[float] = []
    for m in _PRICE_CAP.finditer(clause):
        vals = [float(g) for g in m.groups() if g is not None]
        prices.append(max(vals[:2]) if len(vals) >= 2 and m.group(2) else vals[0])
    for m in _PRICE_RANGE.finditer(clause):
        prices.append(max(float(m.group(1)), float(m.group(2))))
    if prices:
        total = bool(_TOTAL.search(clause)) or (bool(_SPEND_WORD.search(clause)) and not _PER_INST.search(clause))
        out.append(Constraint("max_total_dph" if total else "max_dph_per_instance", min(prices), until))
    rels = []
    for m in _RELIABILITY.finditer(clause):
        raw, pct = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        x = float(raw)
        x = x / 100 if (pct or x > 1) else x
        if 0 < x <= 1:
            rels.append(x)
    if rels:
        out.append(Constraint("min_reliability", max(rels), until))
    return [] if permit and not out else out


def _merge(cs: Iterable[Constraint]) -> list[Constraint]:
    """One constraint per host, machine, banned model and cap: the tightest value, the latest end."""
    def later(a: str | None, b: str | None) -> str | None:
        return None if a is None or b is None else max(a, b)

    out: dict[tuple[str, Any], Constraint] = {}
    for c in cs:
        ident: Any = c.value if c.kind in ("exclude_host", "exclude_machine", "ban_gpus") else None
        prev = out.get((c.kind, ident))
        if prev is None:
            out[(c.kind, ident)] = c
            continue
        if c.kind == "allow_gpus":
            both = [g for g in prev.value if g in c.value] or prev.value
            out[(c.kind, ident)] = Constraint(c.kind, both, later(prev.until, c.until))
        elif c.kind == "min_reliability":
            out[(c.kind, ident)] = Constraint(c.kind, max(prev.value, c.value), later(prev.until, c.until))
        elif c.kind.startswith("max_"):
            out[(c.kind, ident)] = Constraint(c.kind, min(prev.value, c.value), later(prev.until, c.until))
        else:
            out[(c.kind, ident)] = Constraint(c.kind, c.value, later(prev.until, c.until))
    return list(out.values())


def extract(text: str, now: datetime) -> Extraction:
    """What the operator's ``text`` says code can enforce, and the clauses that stay advice."""
    found: list[Constraint] = []
    advice: list[str] = []
    problems: list[str] = []
    for clause in _clauses(text):
        cs, problem = _clause_constraints(clause, now)
        if problem:
            problems.append(problem)
        if cs:
            found += cs
        else:
            advice.append(clause)
    return Extraction(tuple(_merge(found)), tuple(advice), tuple(problems))


# ------------------------------------------------------------------ proposals

_PROPOSAL_KINDS = ("constraint.proposed", "constraint.accepted", "constraint.rejected")


@dataclass(frozen=True)
class Proposal:
    id: int  # the seq of its constraint.proposed
    constraint: Constraint
    source: str  # note | directive | knowledge
    source_seq: int | None
    by: str
    text: str  # the operator's words it came from (cut)
    ts: str
    state: str = "proposed"  # proposed | accepted | rejected
    decided_by: str | None = None

    def describe(self) -> str:
        return self.constraint.describe()


def proposals(log: EventLog) -> dict[int, Proposal]:
    """Every proposal by id, with its state."""
    out: dict[int, Proposal] = {}
    for e in log.read(0, kinds=_PROPOSAL_KINDS):
        p = e.payload
        if e.kind == "constraint.proposed":
            out[e.seq] = Proposal(e.seq, Constraint(p["constraint"], p["value"], p.get("until")), p["source"],
                                  p.get("source_seq"), p["by"], p["text"], e.ts)
        else:
            prev = out.get(int(p["proposal_id"]))
            if prev is not None:
                state = "accepted" if e.kind == "constraint.accepted" else "rejected"
                out[prev.id] = Proposal(prev.id, prev.constraint, prev.source, prev.source_seq, prev.by, prev.text,
                                        prev.ts, state, p["by"])
    return out


def propose(log: EventLog, text: str, *, source: str, source_seq: int | None, by: str,
            tick: int | None = None) -> tuple[list[Event], Extraction]:
    """Extract constraints from ``text`` and log each as a proposal (all in one transaction); raise the
    ``constraint:proposed`` alert so the operator sees them wherever they look."""
    ex = extract(text, log.clock())
    if not ex.constraints:
        return [], ex
    quote = " ".join(text.split())[:300]
    events = log.append_many([
        ("constraint.proposed", {"constraint": c.kind, "value": c.value, "until": c.until, "source": source,
                                 "source_seq": source_seq, "by": by, "text": quote}, "operator", tick)
        for c in ex.constraints])
    ids = ", ".join(f"#{e.seq}" for e in events)
    from agent import feedback

    feedback.raise_alert(log, key="constraint:proposed", severity="info",
                         title=f"operator words give {len(events)} proposed constraint(s) {ids}: accept with "
                         f"'fleet-agent policy accept N', reject with 'policy reject N'",
                         detail="; ".join(f"#{e.seq} {describe(e.payload['constraint'], e.payload['value'], e.payload['until'])}"
                                          for e in events), tick=tick)
    return events, ex


def knowledge_words(payload: dict[str, Any]) -> str:
    """The operator's new words in a ``knowledge.changed``: the whole text of an added file, the added lines
    of a changed one (what was there before was proposed when it was written)."""
    if payload.get("change") == "added":
        return str(payload.get("text") or "")
    if payload.get("change") != "changed":
        return ""
    diff = str(payload.get("diff") or "")
    return "\n".join(ln[1:] for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++"))


def propose_from_knowledge(log: EventLog, events: Iterable[Event], tick: int | None = None) -> list[Event]:
    """Proposals from each knowledge edit among ``events`` (what the tick's scan found on disk)."""
    out: list[Event] = []
    for e in events:
        text = knowledge_words(e.payload) if e.kind == "knowledge.changed" else ""
        if text.strip():
            out += propose(log, text, source="knowledge", source_seq=e.seq,
                           by=str(e.payload.get("by") or "edited on disk"), tick=tick)[0]
    return out


def _resolve_gpus(names: list[str], configured: list[str]) -> list[str]:
    """The configured models a list of named models covers ("A100" covers "A100 SXM4")."""
    out = []
    for g in configured:
        n = norm_gpu(g)
        if any(n == norm_gpu(x) or n.startswith(norm_gpu(x) + " ") or n.replace(" ", "") == norm_gpu(x).replace(
                " ", "") for x in names):
            out.append(g)
    return out


def _later(a: str | None, b: str | None) -> str | None:
    return None if a is None or b is None else max(a, b)


def _apply(log: EventLog, settings: Settings, pol: PolicySettings, c: Constraint, *, by: str,
           reason: str) -> tuple[list[tuple[str, dict[str, Any], str, int | None]], str]:
    """The events that enforce ``c`` now (through the overrides, exclusions and pause every operator uses)
    and what they do; never anything looser than what is in force."""
    if c.kind == "exclude_host":
        x = steering.excluded_hosts(settings, log).get(int(c.value))
        if x is not None and (x.until is None or (c.until is not None and x.until >= c.until)):
            return [], f"host {c.value} is already excluded"
        return [("host.excluded", {"host_id": int(c.value), "by": by, "reason": reason, "source": "operator",
                                   "until": c.until}, "operator", None)], f"host {c.value} excluded"
    if c.kind == "exclude_machine":
        return [], f"machine {c.value} excluded"  # enforced from the accepted constraint (Policy)
    if c.kind == "pause":
        p = steering.paused(log)
        if p is not None and (p.until is None or (c.until is not None and p.until >= c.until)):
            return [], "the fleet is already paused"
        return [("fleet.paused", {"by": by, "reason": reason, "until": c.until}, "operator", None)], "fleet paused"
    key = {"allow_gpus": "allowed_gpus", "ban_gpus": "allowed_gpus"}.get(c.kind, c.kind)
    cur = getattr(pol, key)
    if c.kind == "allow_gpus":
        value: Any = _resolve_gpus(list(c.value), list(cur))
        if not value:
            raise UsageError(f"{', '.join(c.value)}: none of these is allowed now ({', '.join(cur)}); accepting "
                             "would allow no GPU at all; reject it, or change policy.allowed_gpus in the config")
    elif c.kind == "ban_gpus":
        value = [g for g in cur if g not in _resolve_gpus([str(c.value)], list(cur))]
        if not value:
            raise UsageError(f"banning {c.value} would leave no GPU model allowed; reject it, or change "
                             "policy.allowed_gpus in the config")
    elif c.kind == "min_reliability":
        value = max(float(c.value), float(cur))
    else:
        value = min(type(cur)(c.value), cur) if cur is not None else c.value
    if value == cur or (isinstance(value, list) and set(value) == set(cur)):
        return [], f"{key} is already {steering_value(cur)}"
    raw = ",".join(value) if isinstance(value, list) else str(value)
    checked = steering.check_override(settings.policy, key, raw)
    existing = steering.active_overrides(log).get(key)
    until = _later(c.until, existing.until) if existing is not None else c.until
    items: list[tuple[str, dict[str, Any], str, int | None]] = [
        ("policy.override_ended", {"override_id": o.id, "key": key, "how": "replaced", "by": by,
                                   "config_value": getattr(settings.policy, key)}, "operator", None)
        for o in steering.open_overrides(log) if o.key == key]
    items.append(("policy.overridden", {"key": key, "value": checked, "by": by, "reason": reason, "until": until,
                                        "config_value": getattr(settings.policy, key)}, "operator", None))
    return items, f"{key} {steering_value(checked)}"


def steering_value(v: Any) -> str:
    return ", ".join(str(x) for x in v) if isinstance(v, list) else f"{v:g}" if isinstance(v, float) else str(v)


def accept(log: EventLog, settings: Settings, ids: list[int], *, by: str) -> list[tuple[Proposal, str]]:
    """Accept proposals: each is enforced at once through the policy paths and logged as
    ``constraint.accepted`` (the model sees it, tagged). Nothing is written unless every id is valid."""
    ps = proposals(log)
    for i in ids:
        if i not in ps:
            raise UsageError(f"no proposal #{i}; 'fleet-agent policy proposals' lists them")
        if ps[i].state != "proposed":
            raise UsageError(f"proposal #{i} was already {ps[i].state} by {ps[i].decided_by}")
    pol = steering.effective_policy(settings, log)
    for i in ids:  # refuse before writing anything when one cannot be enforced as things stand
        _apply(log, settings, pol, ps[i].constraint, by=by, reason="")
    done: list[tuple[Proposal, str]] = []
    for i in ids:  # one at a time: each sees what the ones before it enforced
        p = ps[i]
        if p.constraint.until is not None and p.constraint.until <= utc_ts(log.clock()):
            raise UsageError(f"proposal #{i} ended at {p.constraint.until[:16]} UTC; nothing to accept")
        reason = f"constraint #{i} from operator {p.source} ({p.by}): {p.text[:200]}"
        items, what = _apply(log, settings, steering.effective_policy(settings, log), p.constraint, by=by,
                             reason=reason)
        with log.transaction():
            applied = log.append_many(items) if items else []
            log.append("constraint.accepted", {"proposal_id": i, "by": by, "constraint": p.constraint.kind,
                                               "value": p.constraint.value, "until": p.constraint.until,
                                               "effect": what, "applied": [e.seq for e in applied]}, "operator")
        done.append((p, what))
    _settle_alert(log)
    return done


def reject(log: EventLog, ids: list[int], *, by: str, reason: str | None) -> list[Proposal]:
    ps = proposals(log)
    for i in ids:
        if i not in ps:
            raise UsageError(f"no proposal #{i}; 'fleet-agent policy proposals' lists them")
        if ps[i].state != "proposed":
            raise UsageError(f"proposal #{i} was already {ps[i].state} by {ps[i].decided_by}")
    with log.transaction():
        log.append_many([("constraint.rejected", {"proposal_id": i, "by": by, "reason": reason}, "operator", None)
                         for i in ids])
    _settle_alert(log)
    return [ps[i] for i in ids]


def _settle_alert(log: EventLog) -> None:
    if not any(p.state == "proposed" for p in proposals(log).values()):
        from agent import feedback

        feedback.resolve_alert(log, "constraint:proposed", "every proposed constraint was accepted or rejected")


def excluded_machines(log: EventLog) -> dict[int, Proposal]:
    """Machine id -> the accepted constraint excluding it now (machines have no other exclusion path)."""
    now = utc_ts(log.clock())
    return {int(p.constraint.value): p for p in proposals(log).values()
            if p.state == "accepted" and p.constraint.kind == "exclude_machine"
            and (p.constraint.until is None or p.constraint.until > now)}


def accepted_in_force(log: EventLog) -> list[Proposal]:
    """The accepted constraints whose time has not run out (what they enforce may since have been ended by
    an operator through ``policy reset``, ``hosts include`` or ``resume``)."""
    now = utc_ts(log.clock())
    return [p for p in proposals(log).values() if p.state == "accepted"
            and (p.constraint.until is None or p.constraint.until > now)]


# ------------------------------------------------------------------ what binds, for the rules provider


@dataclass(frozen=True)
class InForce:
    policy: PolicySettings  # the effective policy (config + overrides)
    excluded_hosts: frozenset[int]
    excluded_machines: frozenset[int]
    paused: bool
    words: Extraction  # what the steering texts say, accepted or not (the rules provider obeys it too)
    advice: tuple[str, ...]  # clauses of the steering texts it cannot parse


    def offer_refusal(self, gpu: str, dph: float, host: int | None) -> str | None:
        """Why an offer breaks what binds or what the operators' words say (None: it does not); what the
        tool layer enforces anyway, told beforehand so a planner does not try."""
        words = self.words.constraints
        gpu = re.sub(r"\s+x\d+$", "", gpu.strip())  # search_offers writes "RTX 4090 x2"
        if host is not None and (host in self.excluded_hosts or any(
                c.kind == "exclude_host" and c.value == host for c in words)):
            return f"host {host} is excluded"
        allowed = list(self.policy.allowed_gpus)
        for c in words:
            if c.kind == "allow_gpus":
                allowed = _resolve_gpus(list(c.value), allowed) or allowed
            elif c.kind == "ban_gpus":
                allowed = [g for g in allowed if g not in _resolve_gpus([str(c.value)], allowed)]
        if norm_gpu(gpu) not in {norm_gpu(g) for g in allowed}:
            return f"{gpu} is not among {', '.join(allowed) or 'no model'}"
        cap = min([self.policy.max_dph_per_instance] + [float(c.value) for c in words
                                                         if c.kind == "max_dph_per_instance"])
        if dph > cap:
            return f"${dph:.3f}/h is over ${cap:g}/h"
        return None

    def words_refusal(self, gpu: str, dph: float, host: int | None) -> str | None:
        """Why the operators' words bar an offer that what binds in code allows (None: they do not): what a search
        leaves out as advice the tool layer would not refuse (an offer the policy refuses is refused anyway)."""
        why = self.offer_refusal(gpu, dph, host)
        bare = replace(self, words=Extraction((), ()))
        return why if why is not None and bare.offer_refusal(gpu, dph, host) is None else None

    def max_instances(self) -> int:
        return min([self.policy.max_instances] + [int(c.value) for c in self.words.constraints
                                                   if c.kind == "max_instances"])




def _lifted(text: str, now: datetime) -> set[tuple[str, Any]]:
    """The restrictions a permission in ``text`` takes back ("host 5 is fine again", "3090s are ok now"):
    (kind, host, machine or GPU model) of each clause that permits and gives no constraint itself."""
    out: set[tuple[str, Any]] = set()
    for clause in _clauses(text):
        if not _PERMIT.search(clause) or _clause_constraints(clause, now)[0]:
            continue
        hosts, machines = _hosts_in(clause)
        out |= {("exclude_host", h) for h in hosts} | {("exclude_machine", m) for m in machines}
        gpus = _gpus_in(_strip_numbers(clause))
        out |= {("ban_gpus", g) for g in gpus} | ({("allow_gpus", None)} if gpus else set())
    return out


def note_words(notes: Iterable[tuple[str, str]], now: datetime) -> Extraction:
    """What unpinned operator notes, ``(ts, text)`` oldest first, still say: each note read by the same grammar
    as directives (``extract``, its time limits counted from when it was said), binding until its own limit or
    ``NOTE_BINDS_HOURS`` after it was said, whichever comes first. A later note overrides an earlier one: its
    rule of the same kind (host, machine, banned model, cap, allowed models) replaces the earlier rule, and a
    permission it gives ("host 5 is fine again") ends the earlier restriction."""
    rules: dict[tuple[str, Any], Constraint] = {}
    advice: list[str] = []
    problems: list[str] = []
    for ts, text in notes:
        said = parse_ts(ts)
        ex = extract(text, said)
        end = utc_ts(said + timedelta(hours=NOTE_BINDS_HOURS))
        for key in _lifted(text, said):
            rules.pop(key, None)
        for c in ex.constraints:
            ident = c.value if c.kind in ("exclude_host", "exclude_machine", "ban_gpus") else None
            rules[(c.kind, ident)] = Constraint(c.kind, c.value, min(c.until or end, end))
        advice += ex.advice
        problems += ex.problems
    live = utc_ts(now)
    return Extraction(tuple(c for c in rules.values() if c.until is None or c.until > live), tuple(advice),
                      tuple(problems))


def in_force(settings: Settings, log: EventLog, texts: list[str],
             notes: Iterable[tuple[str, str]] = ()) -> InForce:
    """What binds now, and what the operators' words say: ``texts`` (directives, knowledge) read as of now,
    ``notes`` (unpinned, ``(ts, text)``) each as of when it was said (``note_words``)."""
    standing = extract("\n".join(texts), log.clock())
    said = note_words(notes, log.clock())
    words = Extraction(tuple(_merge([*standing.constraints, *said.constraints])), standing.advice + said.advice,
                       standing.problems + said.problems)
    advice = tuple(a for a in words.advice if len(a) > 3 and not a.startswith("#"))
    return InForce(steering.effective_policy(settings, log), frozenset(steering.excluded_hosts(settings, log)),
                   frozenset(excluded_machines(log)), steering.paused(log) is not None, words, advice)


def steering_texts(log: EventLog) -> list[str]:
    """The standing operators' words: every knowledge file's text and every active directive's."""
    from agent.feedback import read_knowledge

    texts = [t for n in log.store.knowledge_names() if (t := read_knowledge(log, n))]
    return texts + [d.text for d in log.store.active_directives()]


def notes_in_context(log: EventLog) -> list[tuple[str, str]]:
    """``(ts, text)`` of the unpinned operator notes in the context a model would be sent, oldest first: those in
    the thread (since the last compaction) and those the last compaction kept in its pinned block, said within
    ``NOTE_BINDS_HOURS`` (what each still binds is ``note_words``'s to say)."""
    since = utc_ts(log.clock() - timedelta(hours=NOTE_BINDS_HOURS))
    comp = next(iter(log.read(0, kinds=["context.compacted"], newest_first=True, limit=1)), None)
    kept = sorted((int(w["id"]), str(w["ts"]), str(w["text"])) for w in
                  ((comp.payload.get("pinned") or {}).get("operator") or []) if w.get("kind") == "note") \
        if comp is not None else []
    covered = int(comp.payload["covered_to"]) if comp is not None else 0
    thread = [(e.seq, e.ts, str(e.payload["text"])) for e in log.read(covered, kinds=["operator.note"], since_ts=since)
              if not e.payload.get("pin")]
    return [(ts, text) for _, ts, text in [*kept, *thread] if ts >= since]


def operators_view(settings: Settings, log: EventLog) -> InForce:
    """What binds now and what the operators' words in force say (directives, knowledge files, the notes in the
    model's context): the one reading the rules provider plans by and the observation and tools show the model."""
    return in_force(settings, log, steering_texts(log), notes_in_context(log))

