"""A continuous-batching serving engine, simulated step by step as vLLM v1's scheduler runs it.

Source read: vllm-project/vllm ``vllm/v1/core/sched/scheduler.py`` (``Scheduler.schedule``,
``_preempt_request``) and ``vllm/v1/core/kv_cache_manager.py`` (``allocate_slots``). Each step:

1. **Running requests first**, in admission order, while the step's token budget
   (``max_num_batched_tokens``) lasts: a decoding request gets one token, a request still in
   prefill its next chunk (the rest of its prompt, cut to the budget left: chunked prefill).
   Each needs KV blocks for the tokens it will hold (``block_size`` tokens a block). When the free
   pool is short, the **most recently admitted** running request is preempted: its blocks are
   freed, its progress discarded (recomputed later: prompt plus the tokens generated so far) and
   it goes to the **front** of the waiting queue. If the request itself is the last one left, it
   waits too.
2. **Then waiting requests**, first come first served, unless a request was preempted this step:
   while the budget lasts and fewer than ``max_num_seqs`` run, the head of the queue is admitted
   with a chunk of up to the budget left, if its blocks fit; otherwise admission stops (the head
   is not skipped).
3. The step's forward pass takes ``step_time(batch) + cpu_overhead_s``. A request whose whole
   context is computed samples one token at the end of the step (its first token ends its TTFT);
   one that reaches its output length finishes and frees its blocks.

TensorRT-LLM's default capacity policy, ``GUARANTEED_NO_EVICT`` (``SchedulerConfig.no_evict``;
TensorRT-LLM docs, "Useful Runtime Options: Capacity Scheduler Policy", and ``SchedulerConfig``
in its LLM API reference): a waiting request is admitted only when the blocks of its whole prompt
and answer fit beside what every running request may still take to finish; a running request
then always finds its blocks and nothing is ever preempted. Under load the requests wait in the
queue instead of being preempted and recomputed. TensorRT-LLM also runs without chunked prefill
by default (``SchedulerConfig.chunked_prefill``; LLM API ``enable_chunked_prefill=False``, kept by
AIConfigurator's benchmark configs): a waiting request is admitted only with its whole prompt
within the budget left, else it waits for a step with room, and a prompt longer than the whole
budget is refused ("requests exceeding these limits may result in errors", TensorRT-LLM's
deployment recipes, which name ``enable_chunked_prefill: true`` as the remedy).

SGLang's default (``SchedulerConfig.prefill_first``; its ``Scheduler.get_next_batch_to_run`` runs
a prefill batch whenever it has one, and mixes the running requests' decode into it only with
``--enable-mixed-chunk``, off by default): a step either prefills, the running requests' pending
chunks in admission order while their blocks fit and then admissions as in 2., with no decoding
request in it, or, when there is nothing to prefill, runs 1. over every running request. The
decoding requests wait out each prefill step.

SGLang's admission and retraction (``SchedulerConfig.sglang_admission``; its ``PrefillAdder`` in
``managers/schedule_policy.py`` and ``Scheduler.update_running_batch`` / ``ScheduleBatch.retract_decode``):
a waiting request starts only while its prompt (with the tokens it had generated, if retracted)
plus what is left of its answer, clipped at 4,096 tokens, stays below the free KV tokens less the
running requests' remaining answers (each clipped at 4,096) times ``new_token_ratio``; a request
admitted whole takes its share off that room for the requests behind it in the same step, one
admitted with a chunk of its prompt only the chunk; an idle engine takes the head on its blocks. The
ratio starts at 0.7, falls by (0.7 - 0.098) / 600 at each decode step to 0.098 and returns to 0.7 when
the engine idles. When a decode step's blocks fall short, the requests with the fewest tokens
generated (the longest prompt first among equals) are retracted, at least one, until the free KV
tokens cover 20 more steps of those left; they lose their KV, rejoin the back of the queue, and the
ratio becomes (tokens generated + 20 per request left) / their answer lengths, at most 1. Not
modelled: the radix cache keeping a retracted request's prompt, and page sizes (blocks as vLLM's).

Prefix caching (optional): ``prefix_cache_hit_rate`` of each prompt (whole blocks, at most all but
its last token, as vLLM caps a hit) is found cached when a request is (re)admitted: those tokens
need no prefill compute but their blocks are still held by the request (no sharing between
requests is modelled).

Speculative decoding (``SchedulerConfig.spec``, `spec.SpecDecode`; vLLM v1's scheduler with
``spec_token_ids``): a decoding request schedules its token plus k draft tokens, all counted in
the token budget (the drafts cut to the budget left, as vLLM trims them), and holds KV blocks for
its context plus k lookahead slots. The step's batch carries each decode request's drafts
(`StepBatch.decode_drafts`) for the step time to cost. After the step a decoding request gains the
tokens of its progress accumulator (`spec.py`: floor(j x E) after j steps, at least one a step,
never past its answer length); the KV of the accepted tokens is cached, the last sampled token is
fed next. A prompt's last chunk samples one token as without speculation (TTFT unchanged in kind).

TensorRT-LLM's attention-DP balancing (``SchedulerConfig.adp_balance``; its ``attention_dp_config``
with ``enable_balance``, off by default, and its executor's ``_balance_adp_requests``): under DP
attention each step gathers every group's scheduled new (context) and decoding requests. A step
counter runs at every step, whether or not any group waits. When every group has new requests the
counter resets and, while every group also decodes, they wait ``batching_wait_iters`` more steps,
then go; otherwise new requests go only when the counter reaches ``timeout_iters`` (it resets then)
or when some group has nothing decoding. One group is simulated (``adp_groups`` of them step
together); the others are taken as independent copies of it (mean field): after each release each
other group holds a new request again from a time drawn from an exponential distribution at this
group's arrival rate over its last `ARRIVAL_WINDOW` requests (seeded), or at once if this group still
has some left over. Not modelled: the step time's dependence on the other groups' batches (they are
taken in lockstep with this one, as without balancing).

SGLang's receive interval (``SchedulerConfig.recv_interval``; ``--scheduler-recv-interval``, 1 by
default, and its ``SchedulerRecvSkipper``): the scheduler polls its input for new requests before a
step only when a counter has reached the interval, then resets it; a decode step adds 1 to the
counter, a step with prefill tokens the interval (any prefill step is followed by a poll), and an
idle engine polls at once. A request that reaches the scheduler during a run of decode steps waits
for the next poll: up to the interval's worth of decode steps more before its prefill.

Pipeline parallelism runs several of these engines side by side (`pipeline.py`); this module
simulates one.

Not modelled: ``long_prefill_token_threshold`` (off by default), async scheduling, priority
scheduling, the max-model-len cap, and the drafter's proposals being data dependent (acceptance is
a constant rate, progress its expectation).

Speed: a step whose running requests are all decoding, with nothing to admit (nothing waiting, no
room for another sequence, or a waiting head whose blocks do not fit beside the running requests'
next tokens: the run's later steps only take more blocks), is followed by a run of
identical-composition steps until the next finish, arrival or block shortage; such a run is
advanced at once (the step-time function's ``decode_run`` when it has one, see `batch.py`), and one
that ends at a finish is followed by the next run of the requests left while nothing can join; one
that ends short of blocks by the step that preempts the newest requests and decodes the rest, taken
without the general scheduler (`_short_step`, the cut found from the end of the list). Under
speculative decoding too, when every request's k drafts fit the budget: request i gains
(acc_i + j U) // Q - acc_i // Q tokens in j steps, so the run's contexts, block needs and finish
are closed forms (the step-time function's ``spec_decode_run``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from whichgpu.errors import InputError, NoAnswerError
from whichgpu.serving.batch import DecodeRunStepTime, SpecRunStepTime, StepBatch, StepTime
from whichgpu.serving.kv import DEFAULT_BLOCK_SIZE, BlockGroups, KvCapacity
from whichgpu.serving.results import RequestTimes, ServingResult, summarise
from whichgpu.serving.spec import PROGRESS_UNIT, SpecDecode
from whichgpu.serving.workload import ClosedLoop, Workload

SGLANG_INIT_RATIO = 0.7
"""SGLang's initial ``new_token_ratio`` (``SGLANG_INIT_NEW_TOKEN_RATIO`` x ``--schedule-conservativeness`` 1)."""
SGLANG_MIN_RATIO = SGLANG_INIT_RATIO * 0.14
"""Its floor (``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR`` 0.14 of the initial ratio)."""
SGLANG_RATIO_DECAY = (SGLANG_INIT_RATIO - SGLANG_MIN_RATIO) / 600
"""Its fall per decode step (to the floor in ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`` 600 steps)."""
SGLANG_CLIP = 4096
"""Answer tokens SGLang counts per request at most (``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``)."""
SGLANG_RETRACT_STEPS = 20
"""Decode steps of room a retraction frees for the requests left (``retract_decode_steps``)."""
ARRIVAL_WINDOW = 32
"""Requests over which attention-DP balancing measures a group's arrival rate (`_Engine._release`)."""


def sglang_ratio(base: float, steps: int | np.ndarray) -> np.ndarray:
    """SGLang's new_token_ratio ``steps`` decode steps after it was set to ``base`` (each lowers it
    by SGLANG_RATIO_DECAY, not below SGLANG_MIN_RATIO); one value or an array of them."""
    return np.where(steps == 0, base, np.maximum(base - steps * SGLANG_RATIO_DECAY, SGLANG_MIN_RATIO))


@dataclass(frozen=True)
class SchedulerConfig:
    """The engine's scheduling knobs and its KV block pool."""

    num_blocks: int
    """KV blocks in the pool (`KvCapacity.num_blocks`)."""
    block_size: int = DEFAULT_BLOCK_SIZE
    """Tokens per KV block."""
    max_num_seqs: int = 256
    """Most requests running at once (vLLM ``--max-num-seqs``)."""
    max_num_batched_tokens: int = 2048
    """Token budget of one step (vLLM ``--max-num-batched-tokens``); see `kv.vllm_batch_defaults`."""
    prefix_cache_hit_rate: float = 0.0
    """Fraction of each prompt found in the prefix cache (0: prefix caching off or no reuse)."""
    cpu_overhead_s: float = 0.0
    """CPU scheduling and bookkeeping time added to every step (not overlapped with the GPU)."""
    request_latency_s: float = 0.0
    """Time from a request's send until the scheduler sees it: the serving stack's fixed cost per
    request outside the GPU steps (front end, tokenisation, hand-off to the engine process;
    `Engine.request_overhead_ms`). Counted in TTFT and end-to-end latency; it holds no GPU time."""
    groups: BlockGroups | None = None
    """How many blocks a request of n tokens holds (sliding-window models); None: one block per
    ``block_size`` tokens."""
    spec: SpecDecode | None = None
    """Speculative decoding (None: off). The step-time function must time the draft tokens the
    batches carry (`step.StepModel` built with the same `SpecDecode`)."""
    no_evict: bool = False
    """TensorRT-LLM's ``GUARANTEED_NO_EVICT``: admit a request only when the blocks of its whole
    prompt and answer fit beside the running requests' own (none is ever preempted); False:
    vLLM's and SGLang's admission on the blocks of the next chunk, with preemption."""

    prefill_first: bool = False
    """SGLang's default scheduling (no ``--enable-mixed-chunk``): a step either prefills (the running
    requests' pending chunks, then admissions) with no decoding request in it, or, when there is
    nothing to prefill, decodes every running request; False: vLLM's and TensorRT-LLM's steps that
    mix prefill chunks with every running request's decode."""

    chunked_prefill: bool = True
    """Whether a prompt may be split over steps (vLLM and SGLang chunk by default); False:
    TensorRT-LLM's default (``enable_chunked_prefill=False``): a request is admitted only with its
    whole prompt within the step's budget left, else it waits for a step with room, and a prompt
    longer than the whole budget is refused (`NoAnswerError`). A preempted request's recomputation
    longer than the budget is still split (the engines that preempt chunk)."""

    adp_balance: tuple[int, int] | None = None
    """TensorRT-LLM's attention-DP balancing (``attention_dp_config``: ``enable_balance``, its
    ``timeout_iters`` and ``batching_wait_iters``), as (timeout, wait) steps; None: off, TensorRT-LLM's
    default. Under DP attention (``adp_groups`` > 1) a group's waiting requests are admitted only in a
    step where every group has some, or when ``timeout`` steps have passed since the last release
    (the count runs whether or not any group waits), or when some group has nothing decoding; once
    every group has some, ``wait`` more steps pass first while all are decoding (module doc)."""

    adp_groups: int = 1
    """The attention-DP groups stepping together (this engine simulates one; `adp_balance` treats the
    others as independent copies of it)."""

    sglang_admission: bool = False
    """SGLang's admission (room kept for the running requests' remaining answers, ``new_token_ratio``)
    and retraction (the requests with the fewest tokens generated, to the back of the queue) (module
    doc); False: vLLM's (admission on the next chunk's blocks, the newest preempted, queued first).
    Under speculative decoding the retraction is vLLM's preemption."""

    recv_interval: int = 1
    """SGLang's ``--scheduler-recv-interval`` (its ``SchedulerRecvSkipper``): the scheduler takes in the
    requests that reached it only when a counter has reached this; each decode step adds 1 to the
    counter, a step with prefill tokens the whole interval (its weights: decode 1, any other forward
    mode 1000), and each take resets it; an idle engine takes them at once. 1: at every step, the
    engines' default (module doc)."""

    def refuses(self, prompt_tokens: int) -> bool:
        """Whether the engine refuses a prompt of ``prompt_tokens``: one over the step's budget
        without chunked prefill."""
        return not self.chunked_prefill and prompt_tokens > self.max_num_batched_tokens

    def __post_init__(self) -> None:
        for name in ("num_blocks", "block_size", "max_num_seqs", "max_num_batched_tokens", "recv_interval"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise InputError(f"{name} must be a whole number >= 1, got {v}", field=name)
        if not 0 <= self.prefix_cache_hit_rate < 1:
            raise InputError(f"prefix_cache_hit_rate must be in [0, 1), got {self.prefix_cache_hit_rate}",
                             field="prefix_cache_hit_rate")
        if not self.request_latency_s >= 0:
            raise InputError(f"request_latency_s must be >= 0, got {self.request_latency_s}", field="request_latency_s")
        if not self.cpu_overhead_s >= 0:
            raise InputError(f"cpu_overhead_s must be >= 0, got {self.cpu_overhead_s}", field="cpu_overhead_s")
        if self.spec is not None and not isinstance(self.spec, SpecDecode):
            raise InputError(f"spec must be a SpecDecode or None, got {self.spec!r}", field="spec")
        if self.adp_balance is not None:
            ok = isinstance(self.adp_balance, tuple) and len(self.adp_balance) == 2 and all(
                isinstance(v, int) and not isinstance(v, bool) for v in self.adp_balance)
            if not ok or self.adp_balance[0] < 1 or self.adp_balance[1] < 0:
                raise InputError(f"adp_balance must be (timeout steps >= 1, wait steps >= 0), got {self.adp_balance}",
                                 field="adp_balance")
            if self.prefill_first or self.spec is not None:
                raise InputError("adp_balance is TensorRT-LLM's and needs its mixed steps (prefill_first off), "
                                 "without speculative decoding", field="adp_balance")
        if isinstance(self.adp_groups, bool) or not isinstance(self.adp_groups, int) or self.adp_groups < 1:
            raise InputError(f"adp_groups must be a whole number >= 1, got {self.adp_groups}", field="adp_groups")
        if self.sglang_admission and self.no_evict:
            raise InputError("sglang_admission and no_evict are two engines' admission rules: pick one",
                             field="sglang_admission")
        if self.groups is not None and self.groups.block_size != self.block_size:
            raise InputError(f"groups.block_size {self.groups.block_size} differs from block_size {self.block_size}",
                             field="block_size")

    @classmethod
    def from_capacity(cls, capacity: KvCapacity, **knobs: object) -> SchedulerConfig:
        """The pool of ``capacity`` (blocks, block size, groups) with the other knobs given."""
        return cls(num_blocks=capacity.num_blocks, block_size=capacity.block_size,
                   groups=capacity.groups, **knobs)  # type: ignore[arg-type]


class _Blocks:
    """Blocks held by requests of n tokens, scalar and vectorised (BlockGroups' rule)."""

    def __init__(self, cfg: SchedulerConfig) -> None:
        g = cfg.groups or BlockGroups(cfg.block_size)
        self.bs, self.fg, self.sg, self.cap = g.block_size, g.full_groups, g.sliding_groups, g.sliding_blocks
        self.fx = g.state_groups  # blocks every request holds whatever its length (its states)

    def one(self, n: int) -> int:
        b = (n + self.bs - 1) // self.bs
        return self.fg * b + self.sg * min(b, self.cap) + self.fx

    def tokens(self, blocks: int | np.ndarray) -> int | np.ndarray:
        """KV tokens that ``blocks`` free blocks hold (a token takes a slot in each group): SGLang
        counts its pool in tokens."""
        return blocks * self.bs // (self.fg + self.sg)

    def _offsets(self, ctx: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
        """With x = ctx - 1 = q bs + r: (sum of q, how many r equal each value 0..bs-1, at_least[t] =
        how many r >= t for t in 0..bs+1), what `added_by_steps` counts from."""
        bs = self.bs
        x = ctx - 1
        r = x % bs
        hist = np.bincount(r, minlength=bs)
        at_least = np.zeros(bs + 2, np.int64)
        at_least[:bs] = hist[::-1].cumsum()[::-1]
        return int(((x - r) // bs).sum()), hist, at_least

    def added_by_steps_each(self, ctx: np.ndarray, held_sum: int, steps: np.ndarray) -> np.ndarray:
        """Blocks that each of ``steps`` (>= 0) decode steps of requests with contexts ``ctx`` hold
        beyond ``held_sum`` (`added_by_steps` for an array of step counts; 0 steps add none)."""
        s = steps.astype(np.int64)
        out = np.zeros(s.size, np.int64)
        on = s > 0
        if self.sg:  # sliding groups: count them
            for i in np.flatnonzero(on).tolist():
                out[i] = int(self.many(ctx + int(s[i]) - 1).sum()) - held_sum
            return out
        bs, n = self.bs, int(ctx.size)
        base, hist, at_least = self._offsets(ctx)
        a, b = np.divmod(s, bs)
        more = np.where(b >= 2, at_least[np.clip(bs + 1 - b, 0, bs + 1)], 0)
        added = self.fg * (base + n * a + n - np.where(b == 0, int(hist[0]), 0) + more) + n * self.fx - held_sum
        out[on] = added[on]
        return out

    def added_by_steps(self, ctx: np.ndarray, held_sum: int) -> Callable[[int], int] | None:
        """Blocks that s decode steps of requests with contexts ``ctx`` (step j feeds token ctx + j)
        hold beyond ``held_sum``, as a function of s >= 1 costing O(1) a call: with x = ctx - 1 =
        q bs + r and s = a bs + b, request i holds q_i + a + [r_i + b >= 1] + [r_i + b > bs] blocks
        of each full group. None with sliding-window groups (their cap breaks the closed form)."""
        if self.sg:
            return None
        bs, fg, n = self.bs, self.fg, int(ctx.size)
        base, hist, at_least = self._offsets(ctx)
        zero = int(hist[0])
        ge = at_least.tolist()
        fixed = n * self.fx - held_sum

        def added(s: int) -> int:
            a, b = divmod(s, bs)
            return fg * (base + n * a + n - (zero if b == 0 else 0) + (ge[bs + 1 - b] if b >= 2 else 0)) + fixed
        return added

    def many(self, n: np.ndarray) -> np.ndarray:
        b: np.ndarray = (n + (self.bs - 1)) // self.bs
        if self.sg:
            b = self.fg * b + self.sg * np.minimum(b, self.cap)
        elif self.fg != 1:
            b = self.fg * b
        return b + self.fx if self.fx else b


_SHORT = False
"""`_Engine._decode_run`'s answer when the run ended short of blocks: the next step preempts."""


def simulate(workload: Workload, step_time: StepTime, config: SchedulerConfig, *,
             decode_runs: bool = True) -> ServingResult:
    """Run every request of ``workload`` through the engine; per-request times and aggregates.

    ``decode_runs``: advance runs of identical pure-decode steps at once (False: one step at a
    time, for checking; the results are the same). Raises `NoAnswerError` when a request's prompt
    plus answer can never fit in the KV pool.
    """
    return _Engine(workload, step_time, config, decode_runs).run()


class _Engine:
    """The simulation's state: one row per request in NumPy arrays, queues of request indices."""

    def __init__(self, workload: Workload, step_time: StepTime, cfg: SchedulerConfig, decode_runs: bool) -> None:
        self.cfg, self.step_time, self.decode_runs = cfg, step_time, decode_runs
        self.blocks = _Blocks(cfg)
        lengths = workload.lengths
        n = len(lengths)
        self.n = n
        self.prompt = lengths.input_len
        self.target = lengths.output_len
        spec = cfg.spec
        self.k = spec.draft_len if spec is not None else 0  # lookahead slots per decoding request
        need = self.blocks.many(self.prompt + self.target - 1 + self.k) if self.k else \
            self.blocks.many(self.prompt + self.target - 1)
        self.whole = need  # blocks each request holds at its last step: what no_evict reserves
        worst = int(np.argmax(need))
        if need[worst] > cfg.num_blocks:
            raise NoAnswerError(
                f"request {worst} ({int(self.prompt[worst])} prompt + {int(self.target[worst])} answer tokens) "
                f"needs {int(need[worst])} KV blocks but the cache holds {cfg.num_blocks}")
        longest = int(np.argmax(self.prompt))
        if cfg.refuses(int(self.prompt[longest])):
            raise NoAnswerError(
                f"request {longest}'s prompt of {int(self.prompt[longest]):,} tokens exceeds the step budget of "
                f"{cfg.max_num_batched_tokens:,} (max_num_batched_tokens, TensorRT-LLM max_num_tokens): without "
                "chunked prefill the engine refuses it; a budget of at least the longest prompt serves it")
        self.total = self.prompt.copy()  # tokens known: prompt + generated
        self.computed = np.zeros(n, np.int64)  # tokens whose KV is cached
        self.out = np.zeros(n, np.int64)
        self.held = np.zeros(n, np.int64)  # KV blocks held
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.preempts = np.zeros(n, np.int64)
        self.closed = isinstance(workload.arrival, ClosedLoop)
        if isinstance(workload.arrival, ClosedLoop):
            self.arrival = np.full(n, np.nan)  # send times: set as requests are sent
            self.sent = min(workload.arrival.concurrency, n)  # closed loop: one more sent per finish
            self.arrival[:self.sent] = 0.0
        else:
            self.arrival = workload.arrival.arrivals(n)
            self.sent = n
        self.lag = cfg.request_latency_s
        self.recv = cfg.recv_interval
        self.recv_count = self.recv  # SGLang's receive counter (`_arrive`): the first step polls
        self.next_arrival = 0  # next sent request the scheduler has not seen
        self.waiting: deque[int] = deque()
        self.running: list[int] = []
        self._run_ids: np.ndarray | None = None  # self.running as an array; None: stale
        self.free = cfg.num_blocks
        self.t = 0.0
        self.steps = self.seq_steps = self.peak = self.done = 0
        self.head_blocked = False  # the waiting head did not fit in the free blocks
        self.no_evict = cfg.no_evict
        self.reserved = 0  # no_evict: the running requests' blocks at their last step, summed
        self.all_decoding = False  # every running request was scheduled and sampled a token last step
        self.sglang = cfg.sglang_admission
        self.ratio_base = SGLANG_INIT_RATIO  # SGLang's new_token_ratio: its last set value ...
        self.ratio_steps = 0  # ... and the decode steps since, each lowering it (`_ratio`)
        self.retracted = False  # SGLang: this step retracted (it sets the ratio instead of lowering it)
        self.balance = cfg.adp_balance if cfg.adp_groups > 1 else None
        if self.balance is not None:  # TensorRT-LLM's attention-DP balancing (`_hold`)
            self.adp_count = 0  # steps since the last release (timeout_iters' counter)
            self.adp_waited = 0  # steps waited with every group holding requests (batching_wait_iters')
            # when each other group next holds a waiting request: all at once in the first burst
            self.others = np.zeros(cfg.adp_groups - 1)
            self.seen: deque[float] = deque(maxlen=ARRIVAL_WINDOW)  # when requests reached the scheduler
            self.rng = np.random.default_rng(0)
        self.decode_run = step_time.decode_run if isinstance(step_time, DecodeRunStepTime) else None
        if spec is not None:  # per-request progress accumulator (spec.py), units per step by drafts
            self.acc = np.zeros(n, np.int64)
            self.units = np.array([spec.units(d) for d in range(self.k + 1)], np.int64)
            self.spec_run = step_time.spec_decode_run if isinstance(step_time, SpecRunStepTime) else None

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> ServingResult:
        while self.done < self.n:
            self._arrive()
            if not self.running and not self.waiting:  # idle until the next request reaches the scheduler
                self.t = max(self.t, float(self.arrival[self.next_arrival]) + self.lag)
                self.ratio_base, self.ratio_steps = SGLANG_INIT_RATIO, 0  # SGLang resets it when idle
                self.recv_count = self.recv  # and polls at once
                continue
            self._step()
            if self.decode_runs:
                self._arrive()
                # a run that ends at a finish goes straight on with the requests left while nothing
                # can join (what the next scheduled pure-decode step would do, a run further); one
                # short of blocks is followed by the step that preempts (`_short_step`) and goes on;
                # one cut by an arrival goes back to the scheduler
                while (ended := self._decode_run()) is not None:
                    if ended is _SHORT:
                        self._arrive()  # the poll before that step
                        self._short_step()
                    self._arrive()
        times = RequestTimes(self.arrival, self.first, self.finish, self.prompt, self.target, self.preempts)
        return summarise(times, num_blocks=self.cfg.num_blocks, peak_blocks_used=self.peak, steps=self.steps,
                         seq_steps=self.seq_steps)

    def _running_ids(self) -> np.ndarray:
        """The running requests as an int64 array, in admission order (read only)."""
        a = self._run_ids
        if a is None:
            a = self._run_ids = np.array(self.running, np.int64)
        return a

    def _arrive(self) -> None:
        """Queue every sent request that has reached the scheduler by now, if it polls before this
        step (`SchedulerConfig.recv_interval`: only when its counter has reached the interval, which
        the poll resets; called again before the same step, it finds the counter reset)."""
        if self.recv > 1:
            if self.recv_count < self.recv:
                return
            self.recv_count = 0
        arr, i, t, lag = self.arrival, self.next_arrival, self.t, self.lag
        while i < self.sent and arr[i] + lag <= t:
            self.waiting.append(i)
            if self.balance is not None:
                self.seen.append(float(arr[i]) + lag)
            i += 1
        self.next_arrival = i

    # -- one step ----------------------------------------------------------------------------
    def _step(self) -> None:
        """Schedule, time and advance one step."""
        cfg = self.cfg
        budget = cfg.max_num_batched_tokens
        if cfg.prefill_first and self._prefill_step(budget):
            return
        ids, new, budget, preempted, drafts = self._schedule_running(budget)
        self.head_blocked = False
        adm_ids: list[int] = []
        adm_new: list[int] = []
        if not preempted and (self.balance is None or not self._hold()):
            self._admit(budget, adm_ids, adm_new)
            if self.balance is not None:
                self._release()
        if adm_ids:
            ids = np.concatenate((ids, np.array(adm_ids, np.int64)))
            new = np.concatenate((new, np.array(adm_new, np.int64)))
            if drafts is not None:
                drafts = np.concatenate((drafts, np.zeros(len(adm_ids), np.int64)))
        if ids.size == 0:
            raise RuntimeError("serving simulation scheduled an empty step")  # a bug, never input
        self._execute(ids, new, drafts)

    def _hold(self) -> bool:
        """TensorRT-LLM's attention-DP balancing (``adp_balance``; its executor's
        ``_balance_adp_requests``): whether this step admits no waiting request. The other groups are
        independent copies of this one (mean field): each holds a waiting request from a time drawn
        after its last release at this group's arrival rate (`_release`), and decodes when this one
        does."""
        timeout, wait = self.balance  # type: ignore[misc]
        decoding = bool(self.running)
        if self.waiting and self.others.max() <= self.t:  # every group holds a waiting request
            self.adp_count = 0
            if decoding and self.adp_waited < wait:
                self.adp_waited += 1
                return True
            self.adp_waited = 0
            return False
        self.adp_count += 1
        if self.adp_count >= timeout or not decoding:
            self.adp_count = 0
            return False
        return True

    def _release(self) -> None:
        """The groups admitted their waiting requests this step: those that held some (all of them, if
        this one still has some left over: its budget ran out) hold the next from a time drawn at the
        arrival rate this group has seen over its last `ARRIVAL_WINDOW` requests."""
        if self.waiting:
            return
        held = self.others <= self.t
        n = int(held.sum())
        if n:
            seen = self.seen
            span = seen[-1] - seen[0] if len(seen) > 1 else 0.0
            self.others[held] = self.t + (self.rng.exponential(span / (len(seen) - 1), n) if span > 0 else 0.0)

    def _prefill_step(self, budget: int) -> bool:
        """SGLang's prefill-first step (``prefill_first``): the running requests' pending chunks in
        admission order while their blocks fit (SGLang checks memory before it adds a chunk and
        does not retract for one), then the waiting head and its followers as `_step` admits them,
        no decoding request in the batch. Whether it ran (False: nothing to prefill, the caller
        decodes every running request)."""
        computed, held = self.computed, self.held
        ids: list[int] = []
        new: list[int] = []
        for r in self.running:  # pending: a prompt (or a preempted request's recomputation) not all computed
            if budget <= 0:
                break
            pending = int(self.total[r] - computed[r])
            if pending <= 1 and self.out[r] > 0:
                continue
            n_new = min(pending, budget)
            need = self.blocks.one(int(computed[r]) + n_new) - int(held[r])
            if need > self.free:
                break
            held[r] += need
            self.free -= need
            budget -= n_new
            ids.append(r)
            new.append(n_new)
        self.head_blocked = False
        self._admit(budget, ids, new)
        if not ids:
            return False
        self._execute(np.array(ids, np.int64), np.array(new, np.int64),
                      np.zeros(len(ids), np.int64) if self.k else None)
        return True

    def _admit(self, budget: int, ids: list[int], new: list[int]) -> int:
        """Admit waiting requests first come first served while ``budget`` tokens last and fewer
        than max_num_seqs run, each with its first chunk, while its blocks fit (and, under no_evict,
        its reservation); the head that does not fit stops admission (``head_blocked``). Appends the
        admitted requests and their chunks to ``ids`` and ``new``; returns the budget left."""
        cfg, computed, held = self.cfg, self.computed, self.held
        room: float | None = None  # SGLang: KV tokens left beside the running requests' expected answers
        while self.waiting and budget > 0 and len(self.running) < cfg.max_num_seqs:
            r = self.waiting[0]
            cached, n_new, need = self._admission(r, budget)
            if not self._whole(r, cached, n_new):
                break  # no chunked prefill: the whole prompt, or wait for a step with the budget for it
            if self.sglang:
                if room is None:
                    room = self._room()
                rest = int(self.total[r]) - cached
                want = rest + min(int(self.target[r] - self.out[r]), SGLANG_CLIP)
                if want >= room and self.running:  # (an idle engine takes its first request on its blocks)
                    break  # SGLang's NO_TOKEN: the head waits while the room is short (it grows as the ratio falls)
                room -= want if n_new == rest else n_new  # a chunked admission keeps only its chunk
            if need > self.free or not self._reservable(r):
                self.head_blocked = True  # until blocks are freed (a finish)
                break
            self.waiting.popleft()
            self.running.append(r)
            self._run_ids = None
            if self.no_evict:
                self.reserved += int(self.whole[r])
            computed[r] = cached
            held[r] = need
            self.free -= need
            budget -= n_new
            ids.append(r)
            new.append(n_new)
        return budget

    def _whole(self, r: int, cached: int, n_new: int) -> bool:
        """Whether request ``r`` may take ``n_new`` tokens this step: always with chunked prefill,
        else only its whole rest (or a chunk of a recomputation longer than any step's budget)."""
        if self.cfg.chunked_prefill:
            return True
        rest = int(self.total[r]) - cached
        return n_new == rest or rest > self.cfg.max_num_batched_tokens

    def _reservable(self, r: int) -> bool:
        """Under no_evict, whether request ``r``'s blocks at its last step fit beside the running
        requests' (always True otherwise)."""
        return not self.cfg.no_evict or self.reserved + int(self.whole[r]) <= self.cfg.num_blocks

    def _ratio(self) -> float:
        """SGLang's new_token_ratio now: its last set value, lowered at each decode step since."""
        return float(sglang_ratio(self.ratio_base, self.ratio_steps))

    def _room(self) -> float:
        """SGLang's room for admissions (``PrefillAdder.rem_total_tokens``): the free KV tokens less
        the running requests' remaining answers, each clipped at SGLANG_CLIP, times the ratio."""
        ids = self._running_ids()
        expected = int(np.minimum(self.target[ids] - self.out[ids], SGLANG_CLIP).sum()) if ids.size else 0
        return int(self.blocks.tokens(self.free)) - self._ratio() * expected

    def _retract(self) -> None:
        """SGLang's ``retract_decode``: the running requests with the fewest tokens generated (then the
        longest prompt, then the newest) lose their KV and rejoin the back of the queue, at least one
        and not the last, until the free KV tokens cover SGLANG_RETRACT_STEPS steps of those left;
        the ratio becomes (their tokens generated + that many per request) / their answer lengths."""
        ids = self._running_ids()
        m = ids.size
        out, held = self.out[ids], self.held[ids]
        order = np.lexsort((-np.arange(m), -self.prompt[ids], out))
        freed = self.free + np.cumsum(held[order])  # free blocks after retracting the first r + 1
        left = m - 1 - np.arange(m)
        enough = self.blocks.tokens(freed) >= SGLANG_RETRACT_STEPS * left
        r = min(m - 1, int(np.argmax(enough)) + 1 if enough.any() else m - 1)
        if r < 1:
            return
        gone = order[:r]
        victims = ids[gone]
        self.free += int(held[gone].sum())
        self.held[victims] = 0
        self.computed[victims] = 0
        self.preempts[victims] += 1
        self.waiting.extend(victims.tolist())
        keep = np.ones(m, bool)
        keep[gone] = False
        rest = ids[keep]
        self.running = rest.tolist()
        self._run_ids = rest
        self.ratio_base = min(1.0, float(self.out[rest].sum() + SGLANG_RETRACT_STEPS * rest.size)
                              / float(self.target[rest].sum()))
        self.ratio_steps = 0
        self.retracted = True
        self.head_blocked = False

    def _admission(self, r: int, budget: int) -> tuple[int, int, int]:
        """(tokens of request ``r``'s prompt found in the prefix cache, tokens it would compute
        this step, KV blocks it would hold) were it admitted with ``budget`` tokens left."""
        cfg, total = self.cfg, int(self.total[r])
        cached = 0
        if cfg.prefix_cache_hit_rate:  # whole blocks of the prompt, never its last token
            hit = min(int(cfg.prefix_cache_hit_rate * int(self.prompt[r])), total - 1)
            cached = hit // cfg.block_size * cfg.block_size
        n_new = min(total - cached, budget)
        return cached, n_new, self.blocks.one(cached + n_new)

    def _schedule_running(self, budget: int) -> tuple[np.ndarray, np.ndarray, int, bool, np.ndarray | None]:
        """(ids, new tokens, budget left, preempted?, draft tokens or None without speculation) of
        the running requests' share of the step."""
        running = self.running
        if not running:
            empty = np.zeros(0, np.int64)
            return empty, empty, budget, False, (empty if self.k else None)
        ids = self._running_ids()
        computed, held = self.computed, self.held
        new = self.total[ids] - computed[ids]  # >= 1 for every running request
        if self.k:
            return self._schedule_running_spec(ids, new, budget)
        n, new, need, cut = schedule_running(new, computed[ids], held[ids], budget, self.free, self.blocks.many)
        if self.sglang and cut < ids.size and ids.size > 1:  # SGLang retracts instead (`_retract`)
            self._retract()
            ids = self._running_ids()
            new = self.total[ids] - computed[ids]
            n, new, need, cut = schedule_running(new, computed[ids], held[ids], budget, self.free, self.blocks.many)
        preempted = self._preempt(ids, cut)
        ids = ids[:n]
        held[ids] += need
        self.free -= int(need.sum())
        return ids, new, budget - int(new.sum()), preempted, None

    def _preempt(self, ids: np.ndarray, cut: int) -> bool:
        """Preempt the running requests ``ids[cut:]``: blocks freed, progress lost, to the front
        of the queue. Whether any was."""
        if cut == ids.size:
            return False
        held = self.held
        victims = ids[cut:]
        self.free += int(held[victims].sum())
        if self.no_evict:
            self.reserved -= int(self.whole[victims].sum())
        held[victims] = 0
        self.computed[victims] = 0
        self.preempts[victims] += 1
        self.waiting.extendleft(victims[::-1].tolist())
        del self.running[cut:]
        self._run_ids = ids[:cut]
        return True

    def _schedule_running_spec(self, ids: np.ndarray, new: np.ndarray,
                               budget: int) -> tuple[np.ndarray, np.ndarray, int, bool, np.ndarray]:
        """`_schedule_running` under speculative decoding: a decoding request schedules its token
        plus ``k`` drafts (cut to the budget left, as vLLM trims ``spec_token_ids``) and holds
        blocks for its context plus ``k`` lookahead slots."""
        computed, held, k = self.computed, self.held, self.k
        comp = computed[ids]
        dec = (new == 1) & (self.out[ids] > 0)
        look = comp + 1 + k

        def blocks_of(x: np.ndarray) -> np.ndarray:  # x: computed + scheduled tokens of a prefix
            m = x.size
            return self.blocks.many(np.where(dec[:m], look[:m], x))

        n, sched, need, cut = schedule_running(new + k * dec, comp, held[ids], budget, self.free, blocks_of)
        preempted = self._preempt(ids, cut)
        ids = ids[:n]
        held[ids] += need
        self.free -= int(need.sum())
        drafts = np.where(dec[:n], sched - 1, 0)
        return ids, sched - drafts, budget - int(sched.sum()), preempted, drafts

    def _execute(self, ids: np.ndarray, new: np.ndarray, drafts: np.ndarray | None = None) -> None:
        """Time the step over (ids, new tokens[, drafts]) and advance its requests."""
        computed, total = self.computed, self.total
        ctx_after = computed[ids] + new
        tot = total[ids]
        sampled = ctx_after == tot  # whole context computed: one token sampled
        out_ids = self.out[ids]
        decode = sampled & (new == 1) & (out_ids > 0)
        all_decode = np.count_nonzero(decode) == decode.size
        dec_drafts = None if drafts is None else drafts[decode]
        if all_decode:
            batch = StepBatch.decode_only(ctx_after, dec_drafts)
        else:
            pre = ~decode
            batch = StepBatch(new[pre], ctx_after[pre], ctx_after[decode], dec_drafts)
        self.t += float(self.step_time(batch)) + self.cfg.cpu_overhead_s
        self.recv_count += 1 if all_decode else self.recv
        if all_decode:  # SGLang's ratio falls at each decode step that did not retract
            self.ratio_steps += not self.retracted
        self.retracted = False
        self.steps += 1
        self.seq_steps += int(ids.size)
        self.peak = max(self.peak, self.cfg.num_blocks - self.free)
        computed[ids] = ctx_after
        gen = ids[sampled]
        self.all_decoding = gen.size == ids.size == len(self.running)
        if gen.size and dec_drafts is not None:
            self._advance_spec(ids, sampled, decode, dec_drafts, all_decode)
        elif gen.size:
            out = out_ids[sampled] + 1
            self.out[gen] = out
            total[gen] = tot[sampled] + 1
            if not all_decode:  # a decoding request has had its first token
                fresh = gen[np.isnan(self.first[gen])]
                self.first[fresh] = self.t
            fin = out == self.target[gen]
            if np.count_nonzero(fin):
                self._finish(gen[fin])

    def _advance_spec(self, ids: np.ndarray, sampled: np.ndarray, decode: np.ndarray, drafts: np.ndarray,
                      all_decode: bool) -> None:
        """Speculative decoding: a decoding request gains the tokens its accumulator crosses (the
        accepted drafts and one of the target's), a prompt's last chunk its first token."""
        dec_ids = ids[decode]
        before = self.acc[dec_ids]
        after = before + self.units[drafts]
        self.acc[dec_ids] = after
        gain_all = np.ones(ids.size, np.int64)
        gain_all[decode] = after // PROGRESS_UNIT - before // PROGRESS_UNIT
        gen = ids[sampled]
        gain = np.minimum(gain_all[sampled], self.target[gen] - self.out[gen])
        out = self.out[gen] + gain
        self.out[gen] = out
        self.total[gen] += gain
        self.computed[gen] += gain - 1  # the accepted drafts' KV is cached; the last token is not
        if not all_decode:
            fresh = gen[np.isnan(self.first[gen])]
            self.first[fresh] = self.t
        self._finish(gen[out == self.target[gen]])

    def _finish(self, fin: np.ndarray, keep: np.ndarray | None = None) -> None:
        """Requests ``fin`` have their last token: blocks freed, the closed loop's next sent.
        ``keep``: the running requests left, in order, where the caller has them."""
        if not fin.size:
            return
        self.finish[fin] = self.t
        self.head_blocked = False
        self.free += int(self.held[fin].sum())
        if self.no_evict:
            self.reserved -= int(self.whole[fin].sum())
        self.held[fin] = 0
        if keep is None:
            gone = set(fin.tolist())
            self.running = [r for r in self.running if r not in gone]
            self._run_ids = None
        else:
            self.running = keep.tolist()
            self._run_ids = keep
        self.done += int(fin.size)
        if self.closed:  # each finish lets the next request be sent
            for _ in range(int(fin.size)):
                if self.sent < self.n:  # sent when the client has the last token
                    self.arrival[self.sent] = self.t
                    self.sent += 1

    # -- runs of identical decode steps ------------------------------------------------------
    def _decode_run(self) -> bool | None:
        """Advance at once the pure-decode steps before the next event, when nothing can join.
        How the run ended: True at a finish (another run may go on with the requests left),
        `_SHORT` when the next step's blocks fall short (that step preempts: `_short_step`), None
        otherwise (back to the scheduler)."""
        cfg, running = self.cfg, self.running
        if not running or len(running) * (1 + self.k) > cfg.max_num_batched_tokens:
            return None
        full = len(running) >= cfg.max_num_seqs
        if not self.all_decoding:
            return None
        # attention-DP balancing holding the waiting requests (`_hold`): a run of held steps, until every
        # group holds new ones (then its batching wait and release go step by step) or the timeout
        held = self.balance is not None and bool(self.waiting)
        if held and self.others.max() <= self.t:
            return None
        waits = bool(self.waiting) and not (full or self.head_blocked or held)  # the waiting head may join
        if self.sglang and waits and (self.k or not cfg.prefill_first):
            return None  # SGLang's room changes step by step: its speculative or mixed steps go one at a time
        if self.k:
            if waits:
                return None
            return self._spec_run(full) or None
        ids = self._running_ids()
        ctx = self.total[ids]  # step j feeds token ctx + j
        held_sum = cfg.num_blocks - self.free  # only running requests hold blocks
        last: list[tuple[np.ndarray, int]] = []  # the blocks held after extra()'s last steps, and their sum

        def extra(steps: int) -> int:  # blocks the first ``steps`` steps add
            held_after = self.blocks.many(ctx + steps - 1)
            last[:] = [(held_after, int(held_after.sum()))]
            return last[0][1] - held_sum

        if waits and not self.sglang:
            # the waiting head may join the next step unless the blocks left after the running
            # requests' share of it fall short; the run's steps only take more, so then it waits
            # for a finish all run long (as after a preemption, which skips admission for a step)
            head = self.waiting[0]
            if cfg.prefill_first:  # the head would get a prefill step of its own: the whole budget, all free blocks
                if self._reservable(head) and self._admission(head, cfg.max_num_batched_tokens)[2] <= self.free:
                    return None
            else:
                budget = cfg.max_num_batched_tokens - len(running)
                first = extra(1)
                cached, n_new, need = self._admission(head, budget)
                if budget > 0 and self._whole(head, cached, n_new) and self._reservable(head) and (
                        first > self.free or need <= self.free - first):
                    return _SHORT if first > self.free else None
        left = self.target[ids] - self.out[ids]
        first_finish = k = int(left.min())  # up to and including the next finish
        cum = (self._decode_times(ctx, k) + cfg.cpu_overhead_s).cumsum()
        k = min(k, self._joins_after(cum, full))
        if self.balance is not None:  # stop before the balancing counter's timeout: that step releases (`_hold`)
            k = min(k, self.balance[0] - 1 - self.adp_count)
            if k <= 0:
                return None
            if held:  # and with the steps that start before the other groups all hold new requests
                k = min(k, 1 + int(cum[:k - 1].searchsorted(self.others.max() - self.t)))
        # then the most of those whose blocks fit (the same as fitting first: extra() only grows)
        if extra(k) <= self.free:
            fit = k
        else:
            counted = self.blocks.added_by_steps(ctx, held_sum)
            fit = _most_steps_that_fit(k, extra if counted is None else counted, self.free)
        stepwise = cfg.prefill_first or self.sglang  # a step short of blocks goes back to the scheduler
        if fit == 0:
            return None if stepwise else _SHORT
        joins = False  # SGLang: the run stops where the waiting head's room opens (prefill-first only)
        if waits and self.sglang:
            opens = self._sglang_opens(ctx, held_sum, left, fit)
            if opens == 0:
                return None
            if opens is not None:
                fit, joins = opens, True
        short = fit != k
        if short:  # the bisection's last probe need not be the answer
            k = fit
            extra(k)
        self.t += float(cum[k - 1])
        if self.balance is not None:
            self.adp_count += k
        self._count_decode_steps(k)
        self.steps += k
        self.seq_steps += k * ids.size
        self.ratio_steps += k
        self.free -= last[0][1] - held_sum
        self.held[ids] = last[0][0]
        self.computed[ids] += k
        self.out[ids] += k
        self.total[ids] += k
        self.peak = max(self.peak, cfg.num_blocks - self.free)
        if k == first_finish:  # else no request reached its last token
            done = left == k
            self._finish(ids[done], ids[~done])
            return None if joins else True
        if short:
            return None if stepwise else _SHORT
        return None

    def _sglang_opens(self, ctx: np.ndarray, held_sum: int, left: np.ndarray, steps: int) -> int | None:
        """After how many of the next ``steps`` decode steps (0 to ``steps``) SGLang would admit the
        waiting head in a prefill step of its own (`_admit`'s tests: its first chunk's blocks and
        the room, as the steps take blocks, bring the running answers closer and lower the ratio);
        None: not within them."""
        cfg = self.cfg
        head = self.waiting[0]
        cached, _, need = self._admission(head, cfg.max_num_batched_tokens)
        want = int(self.total[head]) - cached + min(int(self.target[head] - self.out[head]), SGLANG_CLIP)
        if need <= self.free and want < self._room():
            return 0  # room now (the common case: a finish freed it)
        j = np.arange(steps + 1, dtype=np.int64)
        free = self.free - self.blocks.added_by_steps_each(ctx, held_sum, j)
        # the running answers' expected tokens after j steps: sum of min(left - j, CLIP)
        over = np.sort(left - SGLANG_CLIP)  # the part of each answer past the clip, if any
        tail = np.concatenate((np.cumsum(over[::-1])[::-1], [0]))  # tail[i] = over[i:].sum()
        at = np.searchsorted(over, j, side="right")  # answers still past the clip after j steps
        expected = (int(left.sum()) - j * left.size) - (tail[at] - j * (left.size - at))
        room = self.blocks.tokens(free) - sglang_ratio(self.ratio_base, self.ratio_steps + j) * expected
        ok = (need <= free) & (want < room)
        return int(np.argmax(ok)) if ok.any() else None

    def _short_step(self) -> None:
        """What `_step` does when every running request decodes and their next tokens' blocks
        fall short (a `_decode_run` ended `_SHORT`; not under ``prefill_first`` or speculation):
        the newest requests preempted until the rest fit, no admission, a decode step of the rest."""
        ids = self._running_ids()
        held = self.held
        ctx = self.total[ids]  # each feeds its last token: its context after the step
        h = held[ids]
        need = self.blocks.many(ctx) - h
        n = _preemption_cut(need, h, self.free)
        if n == 0:
            raise RuntimeError("serving simulation scheduled an empty step")  # a bug, never input
        self._preempt(ids, n)
        self.head_blocked = False
        ids, need, ctx = ids[:n], need[:n], ctx[:n]
        held[ids] += need
        self.free -= int(need.sum())
        cfg = self.cfg
        self.t += float(self.step_time(StepBatch.decode_only(ctx))) + cfg.cpu_overhead_s
        self.recv_count += 1
        self.steps += 1
        self.ratio_steps += 1
        self.seq_steps += n
        self.peak = max(self.peak, cfg.num_blocks - self.free)
        self.computed[ids] = ctx
        self.total[ids] = ctx + 1
        out = self.out[ids] + 1
        self.out[ids] = out
        self.all_decoding = True
        fin = out == self.target[ids]
        if np.count_nonzero(fin):
            self._finish(ids[fin], ids[~fin])

    def _spec_run(self, full: bool) -> bool:
        """`_decode_run` under speculative decoding: each step verifies k drafts per request and
        request i gains p_i(j) = (acc_i + j U) // Q - acc_i // Q tokens in its first j steps."""
        cfg, k, Q = self.cfg, self.k, PROGRESS_UNIT
        ids = self._running_ids()
        n = ids.size
        ctx = self.total[ids]
        left = self.target[ids] - self.out[ids]
        acc = self.acc[ids]
        U = int(self.units[k])
        base = acc // Q
        to_finish = -(-((base + left) * Q - acc) // U)  # steps until each request has its answer
        steps = int(to_finish.min())
        held_sum = cfg.num_blocks - self.free  # only running requests hold blocks

        def gained(j: int) -> np.ndarray:
            g: np.ndarray = (acc + j * U) // Q - base
            return g

        def extra(m: int) -> int:  # blocks the first m steps add: context + k lookahead slots
            return int(self.blocks.many(ctx + gained(m - 1) + k).sum()) - held_sum

        steps = _most_steps_that_fit(steps, extra, self.free)
        if steps == 0:
            return False
        j = np.arange(steps, dtype=np.int64)
        p = (acc[None, :] + j[:, None] * U) // Q - base[None, :]  # (steps, n) tokens gained before step j
        sums = int(ctx.sum()) + p.sum(axis=1)
        if self.spec_run is not None:
            times = np.asarray(self.spec_run(n, sums, k), dtype=np.float64)
        else:
            drafts = np.full(n, k, np.int64)
            times = np.array([self.step_time(StepBatch.decode_only(ctx + p[i], drafts)) for i in range(steps)],
                             np.float64)
        cum = (times + cfg.cpu_overhead_s).cumsum()
        steps = min(steps, self._joins_after(cum, full))
        self.t += float(cum[steps - 1])
        self._count_decode_steps(steps)
        self.steps += steps
        self.ratio_steps += steps
        self.seq_steps += steps * n
        new_held = self.blocks.many(ctx + gained(steps - 1) + k)
        self.free -= int(new_held.sum()) - held_sum
        self.held[ids] = new_held
        gain = np.minimum(gained(steps), left)
        self.computed[ids] += gain
        self.out[ids] += gain
        self.total[ids] += gain
        self.acc[ids] = acc + steps * U
        self.peak = max(self.peak, cfg.num_blocks - self.free)
        done = to_finish == steps
        self._finish(ids[done], ids[~done])
        return bool(done.any())

    def _joins_after(self, cum: np.ndarray, full: bool) -> int:
        """How many of a run's decode steps (``cum``: their cumulative times) pass before the next sent
        request can join: the run stops after the step during which it reaches the scheduler, at the
        poll after it (`_polled_after`), and it joins the next step; len(cum) when none can join
        within the run (one already waits, no room for another, none sent)."""
        if self.waiting or full or self.next_arrival >= self.sent:
            return int(cum.size)
        arrives = int(cum.searchsorted(self.arrival[self.next_arrival] + self.lag - self.t))
        return min(int(cum.size), self._polled_after(arrives + 1))

    def _polled_after(self, steps: int) -> int:
        """The fewest decode steps, at least ``steps``, after which the scheduler polls for new
        requests (every step without a receive interval; with one, when the counter, now below
        it, reaches it, then every interval)."""
        r = self.recv
        if r <= 1:
            return steps
        first = r - self.recv_count
        return first if steps <= first else first + -(-(steps - first) // r) * r

    def _count_decode_steps(self, k: int) -> None:
        """The receive counter after ``k`` decode steps run at once, with the polls the scheduler
        makes between them (before each step the counter has reached the interval, resetting it)."""
        r = self.recv
        if r <= 1:
            return
        first = r - self.recv_count  # steps until the first poll
        self.recv_count = self.recv_count + k if k <= first else (k - first) % r or r

    def _decode_times(self, ctx: np.ndarray, k: int) -> np.ndarray:
        if self.decode_run is not None:
            return np.asarray(self.decode_run(ctx, k), dtype=np.float64)
        return np.array([self.step_time(StepBatch.decode_only(ctx + j)) for j in range(k)], np.float64)



def _most_steps_that_fit(steps: int, extra: Callable[[int], int], free: int) -> int:
    """The most of `steps` decode steps whose added KV blocks (`extra`, non-decreasing in the
    steps) fit in `free` blocks: all of them, else the largest by bisection (0: not one)."""
    if extra(steps) <= free:
        return steps
    lo, hi = 0, steps
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if extra(mid) <= free:
            lo = mid
        else:
            hi = mid - 1
    return lo

def schedule_running(new: np.ndarray, computed: np.ndarray, held: np.ndarray, budget: int, free: int,
                     blocks_of: Callable[[np.ndarray], np.ndarray]) -> tuple[int, np.ndarray, np.ndarray, int]:
    """vLLM v1's loop over the running requests, vectorised (arrays in admission order).

    The loop: while the budget lasts, request i takes min(its ``new`` tokens, budget left) and the
    blocks they need; while the free blocks fall short, the last request of the list is preempted
    (its held blocks freed), and if that is request i itself, the loop ends. Equivalently, with
    C_i the blocks the first i + 1 requests need and H_s the blocks held from index s on, request
    i is served once the list is cut at the largest s with free + H_s >= C_i, provided s > i.

    Returns (n: the first n requests are served, their tokens, their added blocks, cut: requests
    from index cut on are preempted; cut == len(new) when none is).
    """
    m = new.size
    cum = new.cumsum()
    b = m
    if cum[-1] > budget:  # each takes min(its tokens, budget left) until none is left: a prefix
        new = np.minimum(new, np.maximum(budget - (cum - new), 0))
        b = int(np.count_nonzero(new))
        new = new[:b]
    need = blocks_of(computed[:b] + new) - held[:b]
    c = need.cumsum()
    if c[-1] <= free:
        return b, new, need, m
    suffix = np.zeros(m + 1, np.int64)  # suffix[s] = held[s:].sum()
    suffix[:m] = np.cumsum(held[::-1])[::-1]
    k = np.searchsorted(suffix[::-1], c - free, side="left")  # suffix[::-1] is non-decreasing
    cut_at = m - k  # s_i; -1: not even preempting everything after i suffices
    idx = np.arange(b)
    stop = cut_at <= idx  # request i must preempt itself ...
    stop[1:] |= cut_at[:-1] <= idx[1:]  # ... or an earlier request already cut it off
    if stop.any():
        q = int(np.argmax(stop))
        return q, new[:q], need[:q], q
    return b, new, need, int(cut_at[-1])


def _preemption_cut(need: np.ndarray, held: np.ndarray, free: int) -> int:
    """`schedule_running`'s cut when every running request takes all its tokens (one decoding
    token each) and their blocks ``need`` fall short of ``free``: the requests from the returned
    index s on are preempted, those before it served. As the needs are >= 0, the blocks request i
    needs preempted from the end only grow with i, so s is the longest list whose needs fit once
    the rest is preempted: free + held[s:].sum() >= need[:s].sum(). Preemptions free a request's
    whole cache, so s is found a few requests from the end (a loop, not a search of all m)."""
    c = need.cumsum().tolist()
    h = held.tolist()
    s = len(h)
    while s > 0:
        s -= 1
        free += h[s]
        if s and free >= c[s - 1]:
            return s
    return 0
