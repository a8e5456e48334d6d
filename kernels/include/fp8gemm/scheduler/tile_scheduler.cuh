// Tile schedulers: which output tile (in MMA space) and which K range a CTA works on next.
//
// MMA space: rows = the wgmma M side (tokens normally, weight rows for swap-AB), cols = the
// wgmma N side. `act_on_rows` says which side carries the activations; tiles along the
// activation side vary fastest so that CTAs sharing a weight tile run together.
#pragma once
#include <cstdint>

namespace fp8gemm {

struct Tile {
  int row0, col0;  // first MMA row / column of the tile
  int kb0, kb1;    // K blocks [kb0, kb1)
  int split;       // split-K index (0 without split)
  int tail;        // persistent split tail: index among the split tiles (-1: a whole tile)
  int expert;      // grouped schedules only (grouped_scheduler.cuh): the tile's expert and the
  int tok_end;     // end of its token rows (the other schedulers leave both unset)
};

struct TileShape {
  int tiles_rows, tiles_cols;  // tile counts in MMA space
  int kb_total, kb_per_split, num_splits;
  // Persistent schedules: tiles from tail_first on are split into tail_splits K ranges
  // (tail_fixup.cuh; tail_first = tiles and tail_splits = 1 when none is).
  int tail_first, tail_splits;
};

// One tile per CTA: blockIdx.x = tile, blockIdx.y = K split.
template <int TM, int TN, bool kActOnRows>
struct OneTileScheduler {
  TileShape s;
  bool done = false;
  __device__ __forceinline__ explicit OneTileScheduler(const TileShape& shape) : s(shape) {}
  __device__ __forceinline__ bool next(Tile& t) {
    if (done) return false;
    done = true;
    const int id = blockIdx.x;
    int tr, tc;
    if (kActOnRows) {
      tr = id % s.tiles_rows;
      tc = id / s.tiles_rows;
    } else {
      tc = id % s.tiles_cols;
      tr = id / s.tiles_cols;
    }
    t.row0 = tr * TM;
    t.col0 = tc * TN;
    t.split = blockIdx.y;
    t.kb0 = min(s.kb_total, t.split * s.kb_per_split);
    t.kb1 = min(s.kb_total, t.kb0 + s.kb_per_split);
    t.tail = -1;
    return true;
  }
};

// Persistent: grid = #SMs, CTA i takes units i, i + grid, ... A unit is a tile in a grouped
// raster order (kGroup row-tiles, the activation side, sweep together across the columns, so a
// wave of CTAs shares few weight tiles and few activation tiles in L2), or with a split tail one
// K range of a tile of the last round: the tail_splits ranges of a tile on consecutive CTAs.
template <int TM, int TN, int kGroup>
struct PersistentScheduler {
  TileShape s;
  int next_id;
  __device__ __forceinline__ explicit PersistentScheduler(const TileShape& shape)
      : s(shape), next_id(blockIdx.x) {}
  __device__ __forceinline__ bool next(Tile& t) {
    const int col_units = s.tiles_cols;
    const int tiles = s.tiles_rows * col_units;
    const int total = s.tail_first + (tiles - s.tail_first) * s.tail_splits;
    if (next_id >= total) return false;
    int id = next_id;
    next_id += gridDim.x;
    t.split = 0;
    t.tail = -1;
    t.kb0 = 0;
    t.kb1 = s.kb_total;
    if (id >= s.tail_first) {  // a K range of a split tile
      const int v = id - s.tail_first;
      t.tail = v / s.tail_splits;
      t.split = v - t.tail * s.tail_splits;
      t.kb0 = t.split * s.kb_total / s.tail_splits;
      t.kb1 = (t.split + 1) * s.kb_total / s.tail_splits;
      id = s.tail_first + t.tail;
    }
    const int per_group = kGroup * col_units;
    const int group = id / per_group;
    const int first = group * kGroup;
    const int gsz = min(s.tiles_rows - first, kGroup);
    const int in = id % per_group;
    t.row0 = (first + in % gsz) * TM;
    t.col0 = (in / gsz) * TN;
    return true;
  }
};

// Stream-K (swap-AB decode tiles): the grid's CTAs share the U = tiles x kb_total units of
// (tile, K block) evenly, tile-major with K inside: CTA b takes [b U / G, (b + 1) U / G). A
// launch of one tile per CTA leaves the SMs unevenly loaded (160 tiles on 132 SMs, or a K split
// plus a reduce launch); here every CTA streams the same number of weight bytes. A CTA walks its
// units from the top, so the tile it shares with the next CTA (its low K blocks) comes first and
// its partial is published long before that CTA, which stores the tile, needs it
// (streamk_fixup.cuh). Tile.tail = the tile's id when the CTA holds only part of its K blocks
// (-1: the whole tile), Tile.split = 1 when it holds the last K block (it stores the tile).
__host__ __device__ inline int64_t streamk_units(const TileShape& shape) {
  return static_cast<int64_t>(shape.tiles_rows) * shape.tiles_cols * shape.kb_total;
}
template <int TM, int TN>
struct StreamKScheduler {
  TileShape s;
  int64_t lo, hi;  // units not yet taken: [lo, hi)
  __device__ __forceinline__ explicit StreamKScheduler(const TileShape& shape) : s(shape) {
    const int64_t units = streamk_units(shape);
    lo = units * blockIdx.x / gridDim.x;
    hi = units * (blockIdx.x + 1) / gridDim.x;
  }
  __device__ __forceinline__ bool next(Tile& t) {
    if (hi <= lo) return false;
    const int id = static_cast<int>((hi - 1) / s.kb_total);
    const int64_t first = static_cast<int64_t>(id) * s.kb_total;
    const int64_t seg = lo > first ? lo : first;
    t.kb0 = static_cast<int>(seg - first);
    t.kb1 = static_cast<int>(hi - first);
    hi = seg;
    t.row0 = (id / s.tiles_cols) * TM;
    t.col0 = (id % s.tiles_cols) * TN;
    const bool whole = t.kb0 == 0 && t.kb1 == s.kb_total;
    t.tail = whole ? -1 : id;
    t.split = t.kb1 == s.kb_total ? 1 : 0;
    return true;
  }
};

}  // namespace fp8gemm
