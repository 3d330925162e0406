"""Server instructions per call of crawlq's Redis functions: a deterministic A/B (callgrind).

    python -m benchmarks.ir_ab SRC_A[,SRC_B,...] [--shapes add_new:100,pop:1,...] [--calls N]

For judging Lua changes of 1-5%, which timing on a noisy 2-core machine
cannot see: it counts the instructions redis-server runs (callgrind's Ir) in
the calls of one shape, for each variant, and prints Ir per call and per
item, and each variant's difference against the first.

Each SRC is a folder holding a ``crawlq`` package (``src``, or a copy with
changed Lua). Its ``crawlq`` (and --bench-root's ``benchmarks``, with this
package) are copied into a run folder at start, so the whole run measures the
same code. Every (shape, variant) then gets a fresh redis-server under
callgrind (127.0.0.1, a free port, stopped by its pid) and a fresh Python
process (``benchmarks.ir_ab.child``) with PYTHONPATH=<copy of SRC>:<copy of
benchmarks>: the crawlq it imports, and the Lua library that crawlq loads at
open, are that variant's.

Shapes: ``name[:k][@calls]``, comma separated. ``benchmarks.redis_cost_shapes``
holds them (add_new, add_dup, add_ack, add_pop k; pop, ack, popack k;
pop_empty; w2; the floors ping, nop_ro, nop_w, trivial, pop0, add0): its
set-up and warm-up run untouched, and its timing window (``Window.run``) is
replaced by one that switches callgrind's instrumentation on and zeroes it,
runs the calls, then dumps and switches it off. ``a1`` is
``benchmarks.cluster_a1``'s worker (crawlq's asyncio Scheduler, 32 coroutines
doing get -> add_many of 5 links, half seen -> task_done) after its 1,000
seeds; its window is the whole run of --a1-steps steps (start and close
included). ``a1c:N`` is the same worker on a one-node Redis Cluster
(``redis+cluster://``, the node given every slot) with a crawl of N shards
(default 16): beside ``a1`` it shows what sharding itself costs, with no
second node in the way. ``ping`` is always measured: the floor under every
call.

Figures: server Ir per call, and per item (link for the add shapes, pop, ack,
pop+ack for popack, step for w2, a1 and a1c); FCALLs and the commands the functions
ran (commandstats) per call, with a note when a variant's commands differ; the
share of Lua's garbage collector (luaC_step, Redis's lua_gc every 50 FCALLs)
and string-table growth; each variant's difference against the first, all Ir
and without the GC's ("-GC").

Reading a difference: the same code twice agrees within ~0.05% (0.00% mostly).
Different Lua gives the heap (Lua's GC, libc malloc) another history, whose
lumps land in a window or not: a change to code a shape never runs can still
move that shape's total by up to ~0.5% (k=100 shapes) and its -GC figure by
~0.1-0.2%. ``--replicas 3`` measures each pair after warm-ups of three lengths
and prints the range of the paired differences: trust a difference outside it.

Limits: Ir counts user-space instructions only (no system calls, no network
stack, no cache misses): a proxy for server CPU, not a time. Under callgrind
the server runs ~50x slower, so a1's Scheduler batches more steps per FCALL
than a native run (FCALL/c is printed): compare a1 between variants, never
with native figures.

What keeps it exact (run-to-run within ~0.05%):
- callgrind starts with instrumentation off (set-up uncounted, ~10x faster
  than instrumented) and leaves serverCron out (``--toggle-collect``; a window
  whose start landed inside a cron is detected and measured again afresh);
- redis-server runs with --hz 1 and --activerehashing no (dict rehashing is
  done by the commands alone) and an LD_PRELOAD shim (``fixseed.c``, compiled
  with gcc into the run folder): a fixed /dev/urandom (dict hash seed), fixed
  srandom (skiplist levels), and a virtual wall clock that moves
  --server-clock-us per TIME command only (what Lua reads from TIME, and its
  once-per-second-of-server-time reads, follow the command stream); jemalloc
  does no time-driven purging;
- crawlq's modules see a virtual monotonic clock (10 us per reading), a fixed
  pid and seeded random tokens, so its time-driven choices (prefetch growth,
  the 5 s eviction check, the 1 s accepted-counts send, the recently-seen set's
  turn, ack_delay) do not depend on how slow valgrind makes the server; and
  PYTHONHASHSEED=0.
``--random-seed`` and ``--real-clock`` turn the server and client parts off.

Needs valgrind (callgrind and vgdb), gcc, and redis-server: ``redis-server``
from PATH by default. The distribution's stripped binary gives exact totals
but no names inside Lua: its GC share is Redis's lua_gc calls alone (the one
Lua function it exports); a build with symbols
(``REDIS_BIN=/path/to/redis/src/redis-server``) adds the GC breakdown.
``--redis-arg`` (repeatable; or ``IR_AB_REDIS_ARGS``, split like a shell)
appends redis-server arguments, e.g. ``--redis-arg=--zset-max-listpack-entries
--redis-arg=0`` for a trial of an encoding; they come after the tool's own, so
``--hz`` or ``--activerehashing`` given there undo its determinism.

Modules: ``__main__`` (options, the run), ``shapes`` (the shape list),
``runner`` (the run folder, one measurement per shape and variant),
``server`` (redis-server under callgrind), ``procs`` (the processes a run
starts), ``shim`` (builds ``fixseed.c``), ``child`` (one shape in a fresh
process), ``callgrind`` (monitor commands and dumps), ``report`` (the table).
"""
