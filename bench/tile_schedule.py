#!/usr/bin/python3
"""A model of how long a CUDA attention launch's tiles keep the device busy.

Not a measurement: a list schedule. Each tile (one block: 64 rows of one
head) starts, in launch order, on the first block slot that frees up, as
the GPU starts blocks in blockIdx order; its time is its number of live
chunks under a causal mask (the queries' tiles see 1, 2, ... chunks of
keys, the keys' tiles as many chunks of queries from the other end) plus
half a chunk for staging its own rows and storing its outputs. It prints
the makespan of the order head by head (the kernels' old order) and of the
runtime's order (AttentionTileOrder: heaviest first across a group of
heads), each over the ideal (total work / slots).

    bench/tile_schedule.py                      # GPT-2 small, batch 8
    bench/tile_schedule.py --heads 48 --seq 2048 --slots 396

Usage: tile_schedule.py [--heads H] [--seq S] [--rows 64] [--slots N]
                        [--group G] [--keys]
"""

import argparse
import heapq


def makespan(times, slots):
    free = [0.0] * slots
    end = 0.0
    for t in times:
        start = heapq.heappop(free)
        end = max(end, start + t)
        heapq.heappush(free, start + t)
    return end


def tile_time(index, tiles, keys):
    live = tiles - index if keys else index + 1
    return live + 0.5


def runtime_order(heads, tiles, group, keys):
    """Tile times in the order attentionTilePlace gives (KernelCommon.h)."""
    times = []
    for tile in range(heads * tiles):
        first_head = tile // (group * tiles) * group
        in_group = min(group, heads - first_head)
        rank = (tile - first_head * tiles) // in_group
        index = rank if keys else tiles - 1 - rank
        times.append(tile_time(index, tiles, keys))
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", type=int, default=96,
                    help="batch x heads (default 96: GPT-2 small, batch 8)")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--rows", type=int, default=64, help="rows a tile owns")
    ap.add_argument("--slots", type=int, default=0,
                    help="blocks resident at once (default: 132 SMs x 3 "
                         "for queries, x 2 for keys)")
    ap.add_argument("--group", type=int, default=0,
                    help="heads a group (default: all)")
    ap.add_argument("--keys", action="store_true",
                    help="the dK/dV kernel's tiles (own keys)")
    args = ap.parse_args()
    tiles = (args.seq + args.rows - 1) // args.rows
    slots = args.slots or 132 * (2 if args.keys else 3)
    group = args.group or args.heads
    by_head = [tile_time(i, tiles, args.keys) for _ in range(args.heads)
               for i in range(tiles)]
    ideal = sum(by_head) / slots
    old = makespan(by_head, slots)
    new = makespan(runtime_order(args.heads, tiles, group, args.keys), slots)
    print("%d heads x %d tiles on %d slots (%s): ideal %.1f chunks; head by "
          "head %.2fx ideal; heaviest first in groups of %d heads %.2fx ideal"
          % (args.heads, tiles, slots, "keys" if args.keys else "queries",
             ideal, old / ideal, group, new / ideal))


if __name__ == "__main__":
    main()
