// Port channels across nodes in the executor kernel (docs/transport.md,
// "Integration"; launch.h, theseus_port_rt). A channel end whose peer is on
// another node maps nothing of the peer: its puts, signals and flushes are
// descriptors that one thread posts into the connection's FIFO in pinned,
// device-mapped host memory (port.h, theseus_port_post), which the
// process's proxy drains and executes over UCX; the peer's signals arrive
// in this end's inbound word, host memory too, which the usual semaphore
// wait polls with acquire loads at system scope.
//
// Included by executor.cuh (which defines Ctx, fail, spin, place, resolve
// and read_packet); its hooks there are port_mirror (place), port_data_op
// (data ops), port_signal and port_flush (the sync ops) and port_fence
// (the launch fence).

#pragma once

#include "port.h"

DEV const theseus_port_launch* port_launch(const Ctx& c) { return (const theseus_port_launch*)c.L->port; }

DEV bool port_end(const Ctx& c, i32 ch) { return c.chans[ch].port != 0; }

DEV const theseus_port_rt* port_rt(const Ctx& c, i32 ch) {
  return (const theseus_port_rt*)port_launch(c)->ends + (c.chans[ch].port - 1);
}

// port_mirror reports whether this rank's scratch chunk is one that peers
// on other nodes put into on the staged path: it lives in the mirror.
DEV bool port_mirror(const Ctx& c, i64 chunk, u64& base) {
  const theseus_port_launch* pl = port_launch(c);
  if (pl == nullptr || pl->mirror == 0 || chunk < 0 || chunk >= pl->mirror_chunks) return false;
  const u32* map = (const u32*)pl->mirror_map;
  if (((map[chunk >> 5] >> (chunk & 31)) & 1u) == 0) return false;
  base = pl->mirror;
  return true;
}

// port_post posts descriptor d on end p (thread 0) and returns its ticket
// in t; false after recording the failure (the proxy failed the
// connection, or the launch was aborted while the FIFO was full).
DEV bool port_post(const Ctx& c, u64 fifo, u64 head, const theseus_port_desc& d, u64& t, i64 step, i64 s, i32 ch) {
  t = theseus_port_post((theseus_port_ctrl*)fifo, (uint64_t*)head, &d, (const volatile uint32_t*)c.L->abort_word);
  if (t == ~(u64)0) {
    const bool aborted = ld_volatile_u32((const volatile u32*)c.L->abort_word) != 0;
    fail(c, aborted ? THESEUS_ERR_ABORTED : THESEUS_ERR_PORT, THESEUS_WAIT_PORT, step, s, ch, 0, 0);
    return false;
  }
  return true;
}

// port_done waits (thread 0, bounded) until ticket t of the FIFO is
// complete: the proxy is done with the put's source, or the flush is
// complete at the peer.
DEV bool port_done(const Ctx& c, u64 fifo, u64 t, i64 step, i64 s, i32 ch) {
  const theseus_port_ctrl* f = (const theseus_port_ctrl*)fifo;
  bool ok = spin(c, [&] { return theseus_port_done(f, t) || ((const volatile theseus_port_ctrl*)f)->error != 0; }, THESEUS_WAIT_PORT,
                 step, s, ch, t + 1, (const u64*)&f->tail);
  if (ok && ((const volatile theseus_port_ctrl*)f)->error != 0) {
    fail(c, THESEUS_ERR_PORT, THESEUS_WAIT_PORT, step, s, ch, 0, t + 1);
    return false;
  }
  return ok;
}

// port_where resolves ref r's chunk t of slice s as place() does, and also
// the buffer it lands in after in-place aliasing (k).
DEV Place port_where(const Ctx& c, const theseus_ref& r, i64 t, i64 s, int& k) {
  k = r.buf;
  i64 chunk = r.off + t;
  int phys = (r.flags & THESEUS_REF_REMOTE) ? c.chans[r.channel].peer_phys : c.L->rank;
  resolve(c, phys, k, chunk);
  return place(c, r, t, s);
}

// bar_failed is a barrier after which every thread of the block has the
// same answer to whether the launch failed: s_fail is read between two
// barriers, so that a failure recorded after the first (thread 0 posting
// its next put without a barrier) cannot reach one warp's read and not
// another's, and send the block's threads to different barriers.
DEV bool bar_failed() {
  bar();
  const int f = s_fail;
  bar();
  return f != 0;
}

// port_put runs a copy of one local ref to one ref of a peer on another
// node (the verifier's TS0116 rule: nothing else goes through the proxy):
// one put per run of contiguous chunks, posted by thread 0, which waits
// until the proxy is done with the last (its source may be overwritten
// afterwards). Packet sources are waited for first (every flag of this
// launch), then moved as raw packets: every thread of the block waits for
// its share of the packets (a strided subset, as the LL reduces read
// them; one thread reading a chunk's packets one after the other paid a
// load latency per 16 bytes, the LL one-shot's 32 KiB about 1 ms across
// nodes on the H200).
//
// Kernel staging (pl->stage, the staged path): a source in device memory
// is copied by the block into its area of the staging buffer (pinned host
// memory mapped here), two halves used in turn, and put from there: a
// half is posted when it is full or the destination stops being
// contiguous, and filled again once its previous put is done. The proxy
// then makes no staging copy (a device-to-host copy and its
// synchronisation cost the proxy about 200 us each under MPS while the
// kernel ran: bench/results/2026-12-02-h200-sixteenth, call B). A source
// in the mirror (host memory already) is put from there.
DEV void port_put(const Ctx& c, const theseus_op& op, i64 step, i64 s) {
  const theseus_ref* r = T_REFS(c) + (op.ref_start - T_REF_BASE(c));
  const theseus_ref src = r[0], dst = r[1];
  const bool pkt = (src.flags & THESEUS_REF_PACKET) != 0;
  if (pkt) {
    const bool ll8 = c.L->ll8 != 0;
    const i64 step8 = ll8 ? 8 : 16, nt = (i64)nthreads() * step8;
    for (i64 t = 0; t < op.count && !s_fail; t++) {
      int ks;
      const Place ps = port_where(c, src, t, s, ks);
      for (i64 o = (i64)tid() * step8; o < c.chunkB; o += nt) {
        u32 d0, d1;
        if (!read_packet(c, ps.p + o, ll8, c.flag, d0, d1, step, s)) break;
      }
    }
  }
  if (bar_failed()) return;  // (its first barrier: every thread's writes of the sources, and its packets' flags, before thread 0 posts)
  const i32 ch = dst.channel;
  const theseus_port_rt* p = port_rt(c, ch);
  const theseus_port_launch* pl = port_launch(c);
  const i64 strideB = c.L->stride * c.es;
  const bool kst = pl->stage != 0 && (i64)c.tb < (i64)pl->stage_tbs;
  const i64 half = kst ? pl->stage_tb_bytes / 2 : 0;
  char* area = kst ? (char*)(pl->stage + (u64)c.tb * (u64)pl->stage_tb_bytes) : nullptr;
  const u64 area_off = (u64)c.tb * (u64)pl->stage_tb_bytes;  // its byte offset in the stage region
  // The put being built (every thread tracks it alike; thread 0 posts).
  theseus_port_desc run = {};
  bool on = false, staged = false;
  int h = 0;     // the half being filled
  i64 fill = 0;  // its bytes
  // Thread 0's: the last ticket, and each half's last put.
  bool any = false;
  u64 last = 0, tick[2] = {0, 0};
  bool used[2] = {false, false};
  // post publishes run (every thread calls it alike); after a staged run
  // the next half is waited for. False when the launch failed (after a
  // failure thread 0 posts nothing more).
  auto post = [&]() -> bool {
    if (!on || run.size == 0) {
      on = false;
      return true;
    }
    on = false;
    if (staged) bar();  // every thread's copy into the half before the post
    if (tid() == 0 && !s_fail) {
      fence_sys();
      run.op = THESEUS_PORT_PUT;
      run.channel = p->channel;
      u64 t;
      if (port_post(c, p->fifo, p->head, run, t, step, s, ch)) {
        last = t;
        any = true;
        if (staged) tick[h] = t, used[h] = true;
      }
    }
    if (!staged) return true;
    h ^= 1;
    fill = 0;
    if (tid() == 0 && !s_fail && used[h]) port_done(c, p->fifo, tick[h], step, s, ch);
    return !bar_failed();
  };
  for (i64 t = 0; t < op.count; t++) {
    int ks, kd;
    const Place ps = port_where(c, src, t, s, ks);
    const Place pd = port_where(c, dst, t, s, kd);
    i64 n;
    if (pkt) {
      n = c.chunkB;  // (its packets are there: above)
    } else {
      n = strideB;
      if (ps.bytes >= 0 && ps.bytes < n) n = ps.bytes;
      if (pd.bytes >= 0 && pd.bytes < n) n = pd.bytes;
    }
    if (n <= 0) continue;
    const u64 doff = (u64)pd.p;
    const u16 dreg = p->dst_region[kd];
    const bool inMirror = pl->mirror != 0 && (u64)ps.p >= pl->mirror && (u64)ps.p < pl->mirror + (u64)pl->mirror_bytes;
    if (kst && !inMirror) {
      for (i64 o = 0; o < n;) {
        // A run goes on while the destination is contiguous, the half has
        // room and the source keeps the half's alignment modulo 16 (the
        // copy's vector path); it starts at the source's offset modulo 16.
        const i64 mis = (i64)(((u64)(area + h * half + fill) ^ (u64)(ps.p + o)) & 15);
        if (on && (!staged || run.dst_region != dreg || run.dst_off + run.size != doff + (u64)o || fill == half || mis != 0)) {
          if (!post()) return;
        }
        if (!on) {
          fill = (i64)((u64)(ps.p + o) & 15);  // (the half's first byte is 16-byte aligned)
          run = theseus_port_desc{};
          run.src_off = area_off + (u64)h * (u64)half + (u64)fill;
          run.src_region = p->stage_region;
          run.dst_off = doff + (u64)o;
          run.dst_region = dreg;
          on = staged = true;
        }
        const i64 k = n - o < half - fill ? n - o : half - fill;
        copy_bytes(area + h * half + fill, ps.p + o, k);
        fill += k;
        run.size += (u32)k;
        o += k;
      }
      continue;
    }
    u64 soff;
    u16 sreg;
    if (inMirror) {
      soff = (u64)ps.p - p->mirror_base;
      sreg = p->mirror_region;
    } else {
      soff = (u64)ps.p - p->src_base[ks];
      sreg = p->src_region[ks];
    }
    if (on && !staged && run.src_region == sreg && run.dst_region == dreg && run.src_off + run.size == soff &&
        run.dst_off + run.size == doff && (u64)run.size + (u64)n < (1ull << 30)) {
      run.size += (u32)n;
      continue;
    }
    if (!post()) return;
    run = theseus_port_desc{};
    run.src_off = soff;
    run.dst_off = doff;
    run.size = (u32)n;
    run.src_region = sreg;
    run.dst_region = dreg;
    on = true;
    staged = false;
  }
  if (!post()) return;
  if (tid() == 0 && any && !s_fail) port_done(c, p->fifo, last, step, s, ch);
}

// port_data_op runs data op op through the proxy when it puts to a peer on
// another node, and reports whether it did (else the op is an ordinary
// one).
DEV bool port_data_op(const Ctx& c, const theseus_op& op, i64 step, i64 s) {
  if (c.L->port == 0 || op.ndst == 0) return false;
  const theseus_ref* r = T_REFS(c) + (op.ref_start - T_REF_BASE(c));
  bool any = false;
  for (u32 i = 0; i < (u32)op.nsrc + op.ndst; i++) {
    if ((r[i].flags & THESEUS_REF_REMOTE) && port_end(c, r[i].channel)) any = true;
  }
  if (!any) return false;
  const bool ok = op.opcode == THESEUS_OP_COPY && op.nsrc == 1 && op.ndst == 1 && !(r[0].flags & THESEUS_REF_REMOTE) &&
                  ((r[0].flags ^ r[1].flags) & THESEUS_REF_PACKET) == 0 && (r[1].flags & THESEUS_REF_REMOTE);
  if (!ok) {
    if (tid() == 0) fail(c, THESEUS_ERR_PORT, 0, step, s, r[op.nsrc].channel, op.nsrc, op.ndst);
    return true;
  }
  port_put(c, op, step, s);
  return true;
}

// port_sync posts a signal or a flush (op) on end ch (thread 0) and
// returns its ticket in t: a signal adds 1 to the peer's semaphore after
// the channel's earlier puts; a flush completes once they and the signals
// are complete at the peer.
DEV bool port_sync(const Ctx& c, i32 ch, u8 op, u64& t, i64 step, i64 s) {
  const theseus_port_rt* p = port_rt(c, ch);
  theseus_port_desc d = {};
  d.op = op;
  d.channel = p->channel;
  return port_post(c, p->fifo, p->head, d, t, step, s, ch);
}

DEV bool port_signal(const Ctx& c, i32 ch, i64 step, i64 s) {
  u64 t;
  return port_sync(c, ch, THESEUS_PORT_SIGNAL, t, step, s);
}

// port_flush posts a flush on end ch and waits for it (thread 0).
DEV bool port_flush(const Ctx& c, i32 ch, i64 step, i64 s) {
  u64 t;
  return port_sync(c, ch, THESEUS_PORT_FLUSH, t, step, s) && port_done(c, port_rt(c, ch)->fifo, t, step, s, ch);
}

// port_fence (thread 0) meets every peer on another node at a fenced
// launch: this rank has finished its previous launch (stream order), so it
// signals each fence channel, then waits for each peer's signal.
DEV void port_fence(const Ctx& c) {
  const theseus_port_launch* pl = port_launch(c);
  if (pl == nullptr || pl->nfence <= 0) return;
  const theseus_port_fence* fs = (const theseus_port_fence*)pl->fences;
  for (int f = 0; f < pl->nfence; f++) {
    theseus_port_desc d = {};
    d.op = THESEUS_PORT_SIGNAL;
    d.channel = (u16)fs[f].channel;
    u64 t;
    if (!port_post(c, fs[f].fifo, fs[f].head, d, t, -1, -1, fs[f].peer)) return;
  }
  for (int f = 0; f < pl->nfence; f++) {
    u64* exp = (u64*)fs[f].expected;
    const u64 want = *exp + 1;
    *exp = want;
    const u64* in = (const u64*)fs[f].inbound;
    if (!spin(c, [&] { return ld_poll_sys(in) >= want; }, THESEUS_WAIT_FENCE, -1, -1, fs[f].peer, want, in)) return;
  }
}
