// The point-to-point engine's kernel (docs/p2p.md): one launch runs a group
// of sends and receives, or an AlltoAllv, whose sizes come from the call.
// The protocol is runtime/launch/p2p.go's, which the host backend
// (runtime/host/p2p.go) runs the same way, byte for byte: 2 x channels
// blocks, block c < channels the send lane of channel c (its share of the
// self copies, then channel c of every peer it sends to), block channels+c
// the receive lane of channel c (which also helps send lane c with its
// direct copies: "Helping" below); each lane takes its peers in round order.
//
// Included by executor.cuh; compiled into the uint8 module only (the data
// is bytes: cuda/p2p.go loads the entry from that module). It uses the
// executor's context, failure record, waits and copies (Ctx, fail, spin,
// stop, copy_vec).

#pragma once

#if THESEUS_DTYPE == 1

DEV void st_release_sys(u64* p, u64 v) { asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory"); }
DEV u64 ldv(const u64* p) { return *(const volatile u64*)p; }
DEV void stv(u64* p, u64 v) { *(volatile u64*)p = v; }

__shared__ theseus_p2p_launch s_p2p;
// The AlltoAllv blocks' byte offsets: s_row[j] of the block for rank j in
// the send buffer, s_col[i] of rank i's block in the receive buffer
// (n+1 entries each, the last the total).
__shared__ i64 s_row[THESEUS_P2P_MAX_MATRIX + 1];
__shared__ i64 s_col[THESEUS_P2P_MAX_MATRIX + 1];
// What thread 0 found, for the block: a direct destination (0: the FIFO);
// the slot's chunk offset and length; whether the header was DIRECT.
__shared__ char* s_dst;
__shared__ i64 s_poff, s_plen;
__shared__ int s_direct;

// The connection block's layout (launch.P2PGeometry).
DEV i64 p2p_send_off() { return 2 * (i64)s_p2p.channels * THESEUS_P2P_LINE; }
DEV i64 p2p_hdr_off() { return 2 * p2p_send_off(); }
DEV i64 p2p_data_off() {
  const i64 end = p2p_hdr_off() + (i64)s_p2p.channels * s_p2p.slots * THESEUS_P2P_LINE;
  return (end + THESEUS_P2P_CHUNK_ALIGN - 1) / THESEUS_P2P_CHUNK_ALIGN * THESEUS_P2P_CHUNK_ALIGN;
}
DEV u64* p2p_state(char* b, int ch, int recv) { return (u64*)(b + (2 * (i64)ch + recv) * THESEUS_P2P_LINE); }
DEV u64* p2p_post(char* b, int ch) { return (u64*)(b + p2p_send_off() + 2 * (i64)ch * THESEUS_P2P_LINE); }
DEV u64* p2p_credit(char* b, int ch) { return (u64*)(b + p2p_send_off() + (2 * (i64)ch + 1) * THESEUS_P2P_LINE); }
DEV u64* p2p_hdr(char* b, int ch, int s) { return (u64*)(b + p2p_hdr_off() + ((i64)ch * s_p2p.slots + s) * THESEUS_P2P_LINE); }
DEV char* p2p_data(char* b, int ch, int s) { return b + p2p_data_off() + ((i64)ch * s_p2p.slots + s) * s_p2p.chunk_bytes; }

// Chunks, channels used and a channel's share of a transfer (Chunks, Used,
// Share).
DEV i64 p2p_chunks(i64 total) { return (total + s_p2p.chunk_bytes - 1) / s_p2p.chunk_bytes; }
DEV int p2p_used(i64 total) {
  const i64 n = p2p_chunks(total);
  return (int)(n < s_p2p.channels ? n : s_p2p.channels);
}
DEV i64 p2p_share(i64 total, int ch) {
  const i64 used = p2p_used(total);
  if (ch >= used) return 0;
  const i64 n = p2p_chunks(total), C = s_p2p.chunk_bytes;
  i64 b = (n - ch + used - 1) / used * C;
  if ((n - 1) % used == ch) b -= n * C - total;
  return b;
}

// ---- Helping (docs/p2p.md, "Helping"): a send lane's direct copy is
// shared with this rank's idle receive lanes. Kernel-local: the bytes
// written, the records and the order of the headers are the protocol's.
//
// When send lane c enters the direct phase of a transfer (the rest of its
// share goes straight into the posted buffer), it publishes the rest as a
// job in its help record (P.help, one per channel, local to the rank) and
// cuts it into pieces of whole chunks (an eighth of the rest, from one
// chunk up to THESEUS_P2P_HELP_PIECE bytes: few enough that a piece's
// release costs little, small enough that the two lanes end together). The
// send lane and receive lane channels+c claim pieces from the record's
// claim word (job number << 32 | pieces << 16 | next piece: one word says
// whether the job has a piece left): the send lane by atomic add, a helper
// by compare-and-swap of a word it has seen with pieces left, so a helper
// never takes a piece of a job other than the one it read. A
// helper that took a piece copies it (waiting on nothing), then, after a
// barrier, adds one to the done word with release semantics (GPU scope:
// the send lane is a block of the same grid); the send lane, when no
// piece is left, waits until done counts every piece it did not copy
// itself (acquire), then publishes the DIRECT header as before, with its
// system-scope release: causality is transitive, so what the
// helpers wrote is visible to the receiver before the header. The job
// number moves on with every job (the record is the prepared launch's and
// persists across launches and graph replays), and a job's pieces are all
// taken before the send lane moves on, so no later job's claim word ever
// equals an earlier one's: a stale job is never taken.
//
// A receive lane helps while it waits for a header (thread 0 polls the
// header's flag and the record), and after its receives, until its send
// lane has finished the launch (the record's fin word, against the
// receive lane's own count of launches: the two lanes run once in every
// launch of the prepared launch) or the launch stops.
#define THESEUS_P2P_HELP_PIECE (512ll << 10)
// Words of a help record (THESEUS_P2P_HELP_BYTES): the first line is the
// send lane's (written by it, read by helpers), done and the receive
// lane's launch count the second.
#define P2P_H_CLAIM 0   // job << 32 | pieces << 16 | next piece (pieces < 2^15)
#define P2P_H_SRC 1     // the transfer's source and destination (as mapped here)
#define P2P_H_DST 2
#define P2P_H_TOTAL 3   // its bytes
#define P2P_H_J0 4      // the job's first chunk
#define P2P_H_GEOM 6    // channels used | chunks per piece << 32
#define P2P_H_FIN 7     // launches the send lane has finished
#define P2P_H_DONE 8    // pieces helpers finished (reset by the send lane per job)
#define P2P_H_LAUNCH 9  // launches the receive lane has started

// A job as the block that copies a piece of it knows it.
struct p2p_job {
  const char* src;
  char* dst;
  i64 total, j0, nrest, g;
  int used;
};
__shared__ p2p_job s_job;
__shared__ i64 s_piece;  // the piece the block copies next (-1: none)

DEV u64* p2p_help(int ch) { return s_p2p.help ? (u64*)(s_p2p.help + (u64)ch * THESEUS_P2P_HELP_BYTES) : nullptr; }

DEV u64 p2p_cas_acq_rel(u64* p, u64 cmp, u64 v) {
  u64 old;
  asm volatile("atom.acq_rel.gpu.global.cas.b64 %0, [%1], %2, %3;" : "=l"(old) : "l"(p), "l"(cmp), "l"(v) : "memory");
  return old;
}

// p2p_copy_piece copies piece p of job J with every thread of the block:
// chunks j0 + t x used of the transfer for t in [p x g, (p+1) x g) below
// nrest.
DEV void p2p_copy_piece(const p2p_job& J, i64 p) {
  const i64 C = s_p2p.chunk_bytes;
  const i64 t1 = (p + 1) * J.g < J.nrest ? (p + 1) * J.g : J.nrest;
  for (i64 t = p * J.g; t < t1; t++) {
    const i64 lo = (J.j0 + t * J.used) * C, len = J.total - lo < C ? J.total - lo : C;
    copy_bytes(J.dst + lo, J.src + lo, len);
  }
}

// p2p_help_take (thread 0 of a receive lane) takes a piece of the job in
// help record h if it has one left: s_job and s_piece, and true.
DEV bool p2p_help_take(u64* h) {
  const u64 v = ld_acquire_gpu(&h[P2P_H_CLAIM]);
  if ((v >> 32) == 0 || (v & 0xffff) >= ((v >> 16) & 0xffff)) return false;  // no job, or none left
  if (p2p_cas_acq_rel(&h[P2P_H_CLAIM], v, v + 1) != v) return false;
  // The job stays as it is until done counts this piece.
  const u64 geom = ldv(&h[P2P_H_GEOM]);
  s_job.src = (const char*)ldv(&h[P2P_H_SRC]);
  s_job.dst = (char*)ldv(&h[P2P_H_DST]);
  s_job.total = (i64)ldv(&h[P2P_H_TOTAL]);
  s_job.j0 = (i64)ldv(&h[P2P_H_J0]);
  s_job.used = (int)(geom & 0xffffffffu);
  s_job.g = (i64)(geom >> 32);
  s_job.nrest = (p2p_chunks(s_job.total) - 1 - s_job.j0) / s_job.used + 1;
  s_piece = (i64)(v & 0xffff);
  return true;
}

DEV void p2p_red_release_gpu(u64* p, u64 v) { asm volatile("red.release.gpu.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory"); }

// p2p_help_run copies the piece thread 0 took (s_piece >= 0) and counts it
// done: every thread's writes (the barrier), then thread 0's release, which
// is cumulative over them.
NOINLINE void p2p_help_run(u64* h) {
  p2p_copy_piece(s_job, s_piece);
  bar();
  if (tid() == 0) p2p_red_release_gpu(&h[P2P_H_DONE], 1);
}

// p2p_help_rest is a receive lane's help after its receives: pieces of its
// send lane's jobs until that lane has finished launch k (or the launch
// stops: a failed launch's copies need no help).
NOINLINE void p2p_help_rest(const Ctx& c, u64* h, u64 k) {
  for (;;) {
    if (tid() == 0) {
      s_piece = -1;
      for (u32 n = 1;; n++) {
        if (p2p_help_take(h) || ld_acquire_gpu(&h[P2P_H_FIN]) >= k) break;
        if ((n & 1023) == 0 && stop(c)) break;
      }
    }
    bar();
    if (s_piece < 0) return;
    p2p_help_run(h);
  }
}

// p2p_direct (send lane ch) writes the rest of its share of a transfer of
// total bytes straight into dst, from chunk j0 on (chunks j0, j0 + used,
// ...), sharing it with a helper through its help record when there is one
// and the rest is more than a piece. Returns when every byte is written
// (the caller's barrier and header publish it). Waiting for the helpers'
// pieces ignores the abort word (a piece a helper took is always finished,
// soon: a copy waits on nothing), so that no helper's count lands in a
// later job; the wait is still bounded by the timeout.
NOINLINE bool p2p_direct(const Ctx& c, int ch, const char* src, char* dst, i64 total, i64 j0, int used, u64 tseq, int q) {
  // Thread 0 alone knows the job and whether it is shared: it takes the
  // pieces (atomically when shared) and tells the block which is next.
  u64* h = nullptr;
  i64 np = 0, mine = 0, next = 0;
  if (tid() == 0) {
    const i64 C = s_p2p.chunk_bytes;
    const i64 nrest = (p2p_chunks(total) - 1 - j0) / used + 1;
    const i64 gmax = THESEUS_P2P_HELP_PIECE / C > 1 ? THESEUS_P2P_HELP_PIECE / C : 1;
    i64 g = nrest / 8 < 1 ? 1 : nrest / 8 > gmax ? gmax : nrest / 8;
    if (nrest / g >= (1ll << 14)) g = (nrest + (1ll << 14) - 1) >> 14;  // pieces < 2^15 (the claim word's fields)
    s_job = p2p_job{src, dst, total, j0, nrest, g, used};
    np = (nrest + g - 1) / g;
    h = np > 1 ? p2p_help(ch) : nullptr;
    if (h) {
      u64 job = ((ldv(&h[P2P_H_CLAIM]) >> 32) + 1) & 0xffffffffu;  // (only this lane moves the job number)
      if (job == 0) job = 1;
      stv(&h[P2P_H_SRC], (u64)src);
      stv(&h[P2P_H_DST], (u64)dst);
      stv(&h[P2P_H_TOTAL], (u64)total);
      stv(&h[P2P_H_J0], (u64)j0);
      stv(&h[P2P_H_GEOM], (u64)used | (u64)g << 32);
      stv(&h[P2P_H_DONE], 0);
      st_release_gpu(&h[P2P_H_CLAIM], job << 32 | (u64)np << 16);
    }
  }
  for (;;) {
    if (tid() == 0) {
      const i64 p = h ? (i64)(atom_add_gpu(&h[P2P_H_CLAIM], 1) & 0xffff) : next++;
      s_piece = p < np ? p : -1;
      if (p < np) mine++;
    }
    bar();
    const i64 p = s_piece;
    if (p < 0) break;
    p2p_copy_piece(s_job, p);
    bar();  // every thread has read s_piece and s_job
  }
  if (h) {  // (thread 0)
    const u64 want = (u64)(np - mine), t0 = gtime();
    while (ld_acquire_gpu(&h[P2P_H_DONE]) < want) {
      if (gtime() - t0 > c.L->timeout_ns) {
        fail(c, THESEUS_ERR_TIMEOUT, THESEUS_WAIT_P2P_HELP, (i64)tseq, ch, q, ldv(&h[P2P_H_DONE]), want);
        break;
      }
    }
  }
  bar();
  return !s_fail;
}

// p2p_matrix reads this rank's row and column of the GPU counts matrix,
// checks them (against the CPU copy when checking; their totals against
// the capacity) and fills s_row and s_col. Every lane does it, so every
// lane fails alike.
DEV bool p2p_matrix(const Ctx& c) {
  const theseus_p2p_launch& P = s_p2p;
  const int n = c.L->nranks, me = c.L->rank;
  const u64* G = (const u64*)P.matrix;
  const u64* K = (const u64*)P.check;
  for (int j = tid(); j < n; j += nthreads()) {
    const u64 ri = (u64)me * n + j, ci = (u64)j * n + me;
    const u64 r = G[ri], v = G[ci];
    if (K && r != K[ri]) fail(c, THESEUS_ERR_P2P_MATRIX, THESEUS_P2P_CHECK, (i64)ri, 0, -1, r, K[ri]);
    if (K && v != K[ci]) fail(c, THESEUS_ERR_P2P_MATRIX, THESEUS_P2P_CHECK, (i64)ci, 0, -1, v, K[ci]);
    s_row[j + 1] = (i64)(r > (1ull << 56) ? (1ull << 56) : r);
    s_col[j + 1] = (i64)(v > (1ull << 56) ? (1ull << 56) : v);
  }
  bar();
  if (s_fail) return false;
  if (tid() == 0) {
    const i64 es = P.elem_size, big = 1ll << 62;
    s_row[0] = s_col[0] = 0;
    for (int j = 0; j < n; j++) {
      const i64 rb = s_row[j + 1] * es, cb = s_col[j + 1] * es;  // < 2^60
      s_row[j + 1] = s_row[j] > big - rb ? big : s_row[j] + rb;
      s_col[j + 1] = s_col[j] > big - cb ? big : s_col[j] + cb;
    }
    if (s_row[n] > P.send_cap) fail(c, THESEUS_ERR_P2P_MATRIX, THESEUS_P2P_CAPACITY, -1, 0, -1, (u64)s_row[n], (u64)P.send_cap);
    if (s_col[n] > P.recv_cap) fail(c, THESEUS_ERR_P2P_MATRIX, THESEUS_P2P_CAPACITY, -1, 1, -1, (u64)s_col[n], (u64)P.recv_cap);
  }
  bar();
  return !s_fail;
}

// p2p_base is the byte offset the launch adds to its send-side (recv
// false: sends, the self copies' sources) or receive-side buffers (the
// launch argument's buf[0] and buf[1]: 0 for a launch as prepared, the
// distance to its call's buffers for a rebased one, cuda/p2p.go RebaseP2P).
DEV u64 p2p_base(bool recv) { return s_launch.buf[recv ? 1 : 0]; }

// p2p_xfer resolves transfer x with peer q: its bytes and buffer address.
DEV void p2p_resolve(const theseus_p2p_xfer& x, int q, bool recv, i64& total, char*& buf) {
  total = (i64)x.bytes;
  buf = (char*)(x.buf + p2p_base(recv));
  if (x.matrix) {
    const i64* off = recv ? s_col : s_row;
    total = off[q + 1] - off[q];
    buf += off[q];
  }
}

// p2p_publish writes a header (thread 0): its words, then its flag (the
// slot's sequence number) with release semantics after the slot's data.
//
// Ordering on the memory channels (a peer on this node): the block's
// writes (the chunk) precede thread 0's release through the barrier before
// it (bar.sync orders them in the PTX memory model's causality order, which
// is transitive across scopes), and the reader's acquire load of the flag
// (ld_poll_sys) orders its later reads; the reader's threads read after
// its barrier. So a release store alone publishes, as NCCL's single-thread
// post after a barrier does; the same holds for posts and credits. A
// fence.sc.sys before each of them cost 1.7 us of an 8 B sendrecv
// (bench/results/2026-12-02-h200-eighteenth, call B). Paths that are not
// hot (errors, aborts, peers on other nodes) keep their fences.
DEV void p2p_publish(u64* hdr, u64 flag, u64 tseq, i64 total, i64 off, i64 len, u64 kind, u32 dt) {
  stv(&hdr[THESEUS_P2P_HDR_TSEQ], tseq);
  stv(&hdr[THESEUS_P2P_HDR_TOTAL], (u64)total);
  stv(&hdr[THESEUS_P2P_HDR_OFF], (u64)off);
  stv(&hdr[THESEUS_P2P_HDR_LEN], (u64)len);
  stv(&hdr[THESEUS_P2P_HDR_KIND], kind | (u64)dt << 32);
  st_release_sys(&hdr[THESEUS_P2P_HDR_FLAG], flag);
}

// p2p_post_error reports whether the post holds the peer's error (or
// abort) for transfer tseq.
DEV bool p2p_post_error(const u64* post, u64 tseq) {
  return ld_poll_sys(&post[THESEUS_P2P_POST_TSEQ]) >= tseq && (ldv(&post[THESEUS_P2P_POST_TYPE]) >> 32) != 0;
}

// p2p_post_fail fails transfer tseq with what the peer's error post says.
DEV void p2p_post_fail(const Ctx& c, const u64* post, u64 tseq, int q, i64 total, u32 dt) {
  const u64 pt = ldv(&post[THESEUS_P2P_POST_TYPE]);
  if ((pt >> 32) == THESEUS_P2P_POST_ABORT) {
    fail(c, THESEUS_ERR_P2P_PEER, THESEUS_WAIT_P2P_POST, (i64)tseq, 0, q, 0, 0);
    return;
  }
  fail(c, THESEUS_ERR_P2P_MISMATCH, THESEUS_P2P_BY_RECEIVER, (i64)tseq, (i64)((pt & 0xff) << 8 | dt), q,
       ldv(&post[THESEUS_P2P_POST_TOTAL]), (u64)total);
}

// p2p_take_post (thread 0) looks at the receiver's post for transfer tseq:
// 0 when it has not posted it yet; 1 when it has and the post agrees with
// the send, with *dst the posted buffer as this rank imported it (nullptr
// when it lies in no import: the FIFO for the rest); 2 when it failed (an
// error post, or a post that disagrees: the receive is told when a slot is
// free).
DEV int p2p_take_post(const Ctx& c, const theseus_p2p_peer& pr, int ch, const u64* post, const u64* credit, u64* st, u64 sent,
                      u64 tseq, i64 total, u32 dtype, char** dst) {
  const u64 N = (u64)s_p2p.slots;
  *dst = nullptr;
  if (ld_poll_sys(&post[THESEUS_P2P_POST_TSEQ]) < tseq) return 0;
  const u64 pseq = ldv(&post[THESEUS_P2P_POST_TSEQ]), pt = ldv(&post[THESEUS_P2P_POST_TYPE]);
  const i64 ptot = (i64)ldv(&post[THESEUS_P2P_POST_TOTAL]);
  const u32 pdt = (u32)(pt & 0xffffffffu);
  const int q = pr.peer;
  if ((pt >> 32) != 0) {
    p2p_post_fail(c, post, tseq, q, total, dtype);
    return 2;
  }
  if (pseq != tseq) {
    fail(c, THESEUS_ERR_P2P_MISMATCH, THESEUS_P2P_ORDER, (i64)tseq, (i64)(pdt << 8 | dtype), q, pseq, tseq);
    return 2;
  }
  if (ptot != total || pdt != dtype) {
    if (sent - ld_poll_sys(credit) < N) {  // tell the receive, if a slot is free
      u64* hdr = p2p_hdr((char*)pr.remote, ch, (int)(sent % N));
      stv(&hdr[THESEUS_P2P_HDR_WANT], (u64)ptot);
      stv(&hdr[THESEUS_P2P_HDR_WANTT], pdt);
      p2p_publish(hdr, sent + 1, tseq, total, 0, 0, THESEUS_P2P_KIND_ERROR, dtype);
      st[THESEUS_P2P_STATE_CHUNKS] = sent + 1;
    }
    fail(c, THESEUS_ERR_P2P_MISMATCH, THESEUS_P2P_SENDER, (i64)tseq, (i64)(pdt << 8 | dtype), q, (u64)ptot, (u64)total);
    return 2;
  }
  const u64 addr = ldv(&post[THESEUS_P2P_POST_ADDR]), gen = ldv(&post[THESEUS_P2P_POST_GEN]);
  const theseus_p2p_import* imps = (const theseus_p2p_import*)s_p2p.imports + pr.imp_first;
  for (u32 k = 0; gen != 0 && k < pr.nimport; k++) {
    const theseus_p2p_import& im = imps[k];
    if (im.gen == gen && addr >= im.peer_base && addr - im.peer_base <= im.size && (u64)total <= im.size - (addr - im.peer_base)) {
      *dst = (char*)(im.local + (addr - im.peer_base));
      break;
    }
  }
  return 1;
}

// p2p_send_peer runs channel ch of the transfers to one peer. Thread 0
// waits and decides, the block copies; the lane state is stored as it moves.
// A transfer above the eager bytes to a peer whose offers this rank imported
// goes straight into the receiver's buffer from the first chunk at which
// the receiver has posted it (the chunks before went through the FIFO):
// the send never waits for the post, so that a send completes into the
// receiver's FIFO while it has room, also when the receive comes in a later
// launch (NCCL's ungrouped send, then receive, on both ranks).
DEV bool p2p_send_peer(const Ctx& c, int ch, const theseus_p2p_peer& pr) {
  const theseus_p2p_launch& P = s_p2p;
  const i64 C = P.chunk_bytes;
  const u64 N = (u64)P.slots;
  char* local = (char*)pr.local;
  char* remote = (char*)pr.remote;
  u64* st = p2p_state(local, ch, 0);
  const u64* credit = p2p_credit(local, ch);
  const u64* post = p2p_post(local, ch);
  const int q = pr.peer;
  u64 sent = st[THESEUS_P2P_STATE_CHUNKS], tsent = st[THESEUS_P2P_STATE_TRANSFERS];
  bar();  // every thread has read the state before thread 0 moves it
  const theseus_p2p_xfer* xs = (const theseus_p2p_xfer*)P.xfers + pr.first;
  for (u32 i = 0; i < pr.nxfer; i++) {
    const theseus_p2p_xfer& x = xs[i];
    const u64 tseq = ++tsent;
    if (tid() == 0) st[THESEUS_P2P_STATE_TRANSFERS] = tsent;
    i64 total;
    char* src;
    p2p_resolve(x, q, false, total, src);
    const int used = p2p_used(total);
    if (ch >= used) continue;
    // slot: thread 0 waits for a free slot of the peer's FIFO (or its
    // error post), for the block; while it looks at the post (look), also
    // for the post, and then sets s_dst when the post gives a destination
    // (no slot taken).
    bool look = total > P.eager_bytes && P.direct && pr.nimport > 0;  // thread 0's
    auto slot = [&]() -> bool {
      if (tid() == 0) {
        s_dst = nullptr;
        for (;;) {
          if (look) {
            char* d;
            const int r = p2p_take_post(c, pr, ch, post, credit, st, sent, tseq, total, x.dtype, &d);
            if (r == 2) break;
            if (r == 1) {
              look = false;
              s_dst = d;
              if (d) break;
            }
          }
          const u64 s0 = sent;
          const bool lk = look;
          if (!spin(c, [&] { return s0 - ld_poll_sys(credit) < N || p2p_post_error(post, tseq) || (lk && ld_poll_sys(&post[THESEUS_P2P_POST_TSEQ]) >= tseq); },
                    THESEUS_WAIT_P2P_CREDIT, (i64)tseq, ch, q, s0 - N + 1, credit))
            break;
          if (p2p_post_error(post, tseq)) {
            p2p_post_fail(c, post, tseq, q, total, x.dtype);
            break;
          }
          if (lk && ld_poll_sys(&post[THESEUS_P2P_POST_TSEQ]) >= tseq) continue;  // the post first, then (if no destination) a slot
          if (s0 - ld_poll_sys(credit) < N) break;                               // a free slot
        }
      }
      bar();
      return !s_fail;
    };
    char* dst = nullptr;
    i64 dlo = 0;  // the first chunk written directly, in bytes
    for (i64 j = ch; j * C < total; j += used) {
      const i64 lo = j * C, len = total - lo < C ? total - lo : C;
      if (!slot()) return false;
      dst = s_dst;  // (thread 0 writes it again only after a later barrier)
      if (dst) {    // the rest of the share, from chunk j on, goes straight into the receive buffer
        dlo = lo;
        if (!p2p_direct(c, ch, src, dst, total, j, used, tseq, q)) return false;
        break;
      }
      const int k = (int)(sent % N);
      copy_bytes(p2p_data(remote, ch, k), src + lo, len);
      bar();  // every thread's data before the header
      if (tid() == 0) {
        p2p_publish(p2p_hdr(remote, ch, k), sent + 1, tseq, total, lo, len, THESEUS_P2P_KIND_DATA, x.dtype);
        st[THESEUS_P2P_STATE_CHUNKS] = sent + 1;
      }
      sent++;
    }
    if (dst) {  // (p2p_direct ended with a barrier: every thread's direct writes, and the helpers', before the header)
      look = false;
      if (!slot()) return false;
      if (tid() == 0) {
        const i64 rest = p2p_share(total, ch) - (dlo / C - ch) / used * C;
        p2p_publish(p2p_hdr(remote, ch, (int)(sent % N)), sent + 1, tseq, total, dlo, rest, THESEUS_P2P_KIND_DIRECT, x.dtype);
        st[THESEUS_P2P_STATE_CHUNKS] = sent + 1;
      }
      sent++;
    }
  }
  return true;
}

// p2p_post_next posts (thread 0) the first receive from transfer i on
// (number tseq) that has data on channel ch.
DEV void p2p_post_next(const theseus_p2p_peer& pr, int ch, u32 i, u64 tseq) {
  const theseus_p2p_xfer* xs = (const theseus_p2p_xfer*)s_p2p.xfers + pr.first;
  for (; i < pr.nxfer; i++, tseq++) {
    i64 total;
    char* buf;
    p2p_resolve(xs[i], pr.peer, true, total, buf);
    if (p2p_used(total) > ch) {
      u64* post = p2p_post((char*)pr.remote, ch);
      stv(&post[THESEUS_P2P_POST_TOTAL], (u64)total);
      stv(&post[THESEUS_P2P_POST_TYPE], xs[i].dtype);
      stv(&post[THESEUS_P2P_POST_ADDR], (u64)buf);
      stv(&post[THESEUS_P2P_POST_GEN], xs[i].gen);
      st_release_sys(&post[THESEUS_P2P_POST_TSEQ], tseq);  // (p2p_publish: the ordering)
      return;
    }
  }
}

// p2p_recv_peer reads channel ch of the transfers from one peer.
DEV bool p2p_recv_peer(const Ctx& c, int ch, const theseus_p2p_peer& pr) {
  const theseus_p2p_launch& P = s_p2p;
  const i64 C = P.chunk_bytes;
  const u64 N = (u64)P.slots;
  char* local = (char*)pr.local;
  char* remote = (char*)pr.remote;
  u64* st = p2p_state(local, ch, 1);
  u64* credit = p2p_credit(remote, ch);
  u64* post = p2p_post(remote, ch);
  u64* help = p2p_help(ch);  // the send lane this lane helps while it waits
  const int q = pr.peer;
  u64 recvd = st[THESEUS_P2P_STATE_CHUNKS], trecv = st[THESEUS_P2P_STATE_TRANSFERS];
  bar();  // every thread has read the state before thread 0 moves it
  const theseus_p2p_xfer* xs = (const theseus_p2p_xfer*)P.xfers + pr.first;
  for (u32 i = 0; i < pr.nxfer; i++) {
    const theseus_p2p_xfer& x = xs[i];
    const u64 tseq = ++trecv;
    if (tid() == 0) st[THESEUS_P2P_STATE_TRANSFERS] = trecv;
    i64 total;
    char* dst;
    p2p_resolve(x, q, true, total, dst);
    const int used = p2p_used(total);
    if (ch >= used) continue;
    for (i64 j = ch; j * C < total; j += used) {
      const int k = (int)(recvd % N);
      u64* hdr = p2p_hdr(local, ch, k);
      for (;;) {  // until the header is there (or the wait failed), helping the send lane meanwhile
        if (tid() == 0) {
          const u64 want = recvd + 1;
          s_piece = -1;
          if (spin(c, [&] { return ld_poll_sys(&hdr[THESEUS_P2P_HDR_FLAG]) >= want || (help && p2p_help_take(help)); },
                   THESEUS_WAIT_P2P_HEADER, (i64)tseq, ch, q, want, &hdr[THESEUS_P2P_HDR_FLAG]) &&
              s_piece < 0) {
            const u64 kd = ldv(&hdr[THESEUS_P2P_HDR_KIND]), sseq = ldv(&hdr[THESEUS_P2P_HDR_TSEQ]);
            const u64 kind = kd & 0xffffffffu;
            const u32 sdt = (u32)(kd >> 32);
            const i64 stot = (i64)ldv(&hdr[THESEUS_P2P_HDR_TOTAL]);
            s_direct = 0;
            if (kind == THESEUS_P2P_KIND_ABORT) {
              fail(c, THESEUS_ERR_P2P_PEER, THESEUS_WAIT_P2P_HEADER, (i64)tseq, 0, q, 0, 0);
            } else if (kind == THESEUS_P2P_KIND_ERROR) {
              fail(c, THESEUS_ERR_P2P_MISMATCH, THESEUS_P2P_BY_SENDER, (i64)tseq, (i64)(sdt << 8 | x.dtype), q, (u64)stot, (u64)total);
            } else if (sseq != tseq || stot != total || sdt != x.dtype) {
              stv(&post[THESEUS_P2P_POST_TOTAL], (u64)total);
              stv(&post[THESEUS_P2P_POST_TYPE], x.dtype | (u64)THESEUS_P2P_POST_ERROR << 32);
              fence_sys();
              st_release_sys(&post[THESEUS_P2P_POST_TSEQ], tseq);
              fail(c, THESEUS_ERR_P2P_MISMATCH, THESEUS_P2P_RECEIVER, (i64)tseq, (i64)(sdt << 8 | x.dtype), q, (u64)stot, (u64)total);
            } else if (kind == THESEUS_P2P_KIND_DIRECT) {
              // The rest of the channel's share, from chunk j on, is in place.
              s_direct = 1;
              const i64 rest = p2p_share(total, ch) - (j - ch) / used * C;
              if ((i64)ldv(&hdr[THESEUS_P2P_HDR_OFF]) != j * C || (i64)ldv(&hdr[THESEUS_P2P_HDR_LEN]) != rest)
                fail(c, THESEUS_ERR_BADREF, THESEUS_WAIT_P2P_HEADER, (i64)tseq, ch, q, ldv(&hdr[THESEUS_P2P_HDR_LEN]), (u64)rest);
            } else {
              s_poff = (i64)ldv(&hdr[THESEUS_P2P_HDR_OFF]);
              s_plen = (i64)ldv(&hdr[THESEUS_P2P_HDR_LEN]);
              if (s_poff != j * C || s_plen != (total - s_poff < C ? total - s_poff : C))
                fail(c, THESEUS_ERR_BADREF, THESEUS_WAIT_P2P_HEADER, (i64)tseq, ch, q, (u64)s_poff, (u64)(j * C));
            }
            // (the flag's acquire load orders these reads and, through the
            // barrier, the block's reads of the slot: p2p_publish)
          }
        }
        bar();
        if (s_piece < 0) break;
        p2p_help_run(help);
      }
      if (s_fail) return false;
      const int direct = s_direct;
      const i64 off = s_poff, len = s_plen;
      bar();  // every thread has them before thread 0 may write the next
      if (!direct) {
        copy_bytes(dst + off, p2p_data(local, ch, k), len);
        bar();  // every thread's reads of the slot before the credit
      }
      recvd++;
      if (tid() == 0) {
        st[THESEUS_P2P_STATE_CHUNKS] = recvd;
        st_release_sys(credit, recvd);  // after the block's reads of the slot (the barrier): p2p_publish
      }
      if (direct) break;  // the channel's share is in place
    }
    if (tid() == 0) p2p_post_next(pr, ch, i + 1, tseq + 1);
  }
  return true;
}

// ---- Peers on other nodes (docs/p2p.md, "Across nodes"): the host
// engine's protocol over the proxy's port channels (runtime/host/p2p.go:
// putPort, publishPort, postPort, credit), descriptor for descriptor. The
// sender writes a chunk and its header into its copy of the peer's block
// (remote, device memory), then posts a put of the chunk and a put of the
// header with a signal on the channel's arrival channel; the receiver
// waits for its arrival word (its block, local, is pinned device-mapped
// host memory that the peer's puts and signals land in) instead of the
// header's flag, copies the chunk out and returns the slot with a signal
// on the credit channel (which adds 1 to the sender's credit word). No
// posts are written across nodes (no direct writes there), except error
// and abort posts, which are put and flushed. Thread 0 posts; every post
// is bounded by the abort word and the proxy's error word (port.h).

// p2p_lane is the lane that carries channel ch of a peer on another node.
DEV const theseus_p2p_lane& p2p_lane(const theseus_p2p_peer& pr, int ch) {
  return ((const theseus_p2p_lane*)s_p2p.lanes)[pr.lane_first + (u32)ch % pr.nlanes];
}

// p2p_port_failed: the proxy failed channel ch's connection.
DEV bool p2p_port_failed(const theseus_p2p_peer& pr, int ch) { return ((const volatile theseus_port_ctrl*)p2p_lane(pr, ch).fifo)->error != 0; }

// p2p_port_op posts one descriptor for channel ch of peer pr (thread 0):
// op on its arrival channel (credit 0) or credit channel (credit 1); a put
// carries n bytes at byte off of the block copy to the same offset of the
// peer's block. False after recording the failure.
DEV bool p2p_port_op(const Ctx& c, const theseus_p2p_peer& pr, int ch, int credit, u8 op, i64 off, i64 n, u64 tseq) {
  theseus_port_desc d = {};
  d.op = op;
  d.channel = ((const u16*)s_p2p.chans)[pr.chan_first + 2 * ch + credit];
  if (op & THESEUS_PORT_PUT) {
    d.src_off = d.dst_off = (u64)off;
    d.size = (u32)n;
    d.src_region = pr.src_region;
    d.dst_region = pr.dst_region;
  }
  const theseus_p2p_lane& ln = p2p_lane(pr, ch);
  if (theseus_port_post((theseus_port_ctrl*)ln.fifo, (uint64_t*)ln.head, &d, (const volatile uint32_t*)c.L->abort_word) != ~(u64)0)
    return true;
  const bool aborted = ld_volatile_u32((const volatile u32*)c.L->abort_word) != 0;
  fail(c, aborted ? THESEUS_ERR_ABORTED : THESEUS_ERR_PORT, THESEUS_WAIT_P2P_FIFO, (i64)tseq, ch, pr.peer, 0, 0);
  return false;
}

// p2p_port_publish puts the slot k's data (n bytes, a DATA header's) and
// header, then signals its arrival (thread 0; the header is written).
DEV bool p2p_port_publish(const Ctx& c, const theseus_p2p_peer& pr, int ch, int k, i64 n, u64 kind, u64 tseq) {
  char* b = (char*)pr.remote;
  if (kind == THESEUS_P2P_KIND_DATA && n > 0 && !p2p_port_op(c, pr, ch, 0, THESEUS_PORT_PUT, p2p_data(b, ch, k) - b, n, tseq)) return false;
  return p2p_port_op(c, pr, ch, 0, THESEUS_PORT_PUT | THESEUS_PORT_SIGNAL, (char*)p2p_hdr(b, ch, k) - b, THESEUS_P2P_LINE, tseq);
}

// p2p_port_post_line puts channel ch's post line (an error or abort post,
// written into the block copy) and flushes it (thread 0).
DEV bool p2p_port_post_line(const Ctx& c, const theseus_p2p_peer& pr, int ch, u64 tseq) {
  char* b = (char*)pr.remote;
  return p2p_port_op(c, pr, ch, 1, THESEUS_PORT_PUT, (char*)p2p_post(b, ch) - b, THESEUS_P2P_LINE, tseq) &&
         p2p_port_op(c, pr, ch, 1, THESEUS_PORT_FLUSH, 0, 0, tseq);
}

// p2p_send_port runs channel ch of the transfers to a peer on another node
// (p2p_send_peer's FIFO path; never direct).
NOINLINE bool p2p_send_port(const Ctx& c, int ch, const theseus_p2p_peer& pr) {
  const theseus_p2p_launch& P = s_p2p;
  const i64 C = P.chunk_bytes;
  const u64 N = (u64)P.slots;
  char* local = (char*)pr.local;
  char* remote = (char*)pr.remote;
  u64* st = p2p_state(local, ch, 0);
  const u64* credit = p2p_credit(local, ch);
  const u64* post = p2p_post(local, ch);
  const int q = pr.peer;
  u64 sent = st[THESEUS_P2P_STATE_CHUNKS], tsent = st[THESEUS_P2P_STATE_TRANSFERS];
  bar();  // every thread has read the state before thread 0 moves it
  const theseus_p2p_xfer* xs = (const theseus_p2p_xfer*)P.xfers + pr.first;
  for (u32 i = 0; i < pr.nxfer; i++) {
    const theseus_p2p_xfer& x = xs[i];
    const u64 tseq = ++tsent;
    if (tid() == 0) st[THESEUS_P2P_STATE_TRANSFERS] = tsent;
    i64 total;
    char* src;
    p2p_resolve(x, q, false, total, src);
    const int used = p2p_used(total);
    if (ch >= used) continue;
    for (i64 j = ch; j * C < total; j += used) {
      const i64 lo = j * C, len = total - lo < C ? total - lo : C;
      if (tid() == 0) {
        const u64 s0 = sent;
        if (spin(c, [&] { return s0 - ld_poll_sys(credit) < N || p2p_post_error(post, tseq) || p2p_port_failed(pr, ch); }, THESEUS_WAIT_P2P_CREDIT,
                 (i64)tseq, ch, q, s0 - N + 1, credit)) {
          if (p2p_post_error(post, tseq))
            p2p_post_fail(c, post, tseq, q, total, x.dtype);
          else if (s0 - ld_poll_sys(credit) >= N)
            fail(c, THESEUS_ERR_PORT, THESEUS_WAIT_P2P_CREDIT, (i64)tseq, ch, q, 0, 0);
        }
      }
      bar();
      if (s_fail) return false;
      const int k = (int)(sent % N);
      copy_bytes(p2p_data(remote, ch, k), src + lo, len);
      bar();  // every thread's data before the header and its put
      if (tid() == 0) {
        p2p_publish(p2p_hdr(remote, ch, k), sent + 1, tseq, total, lo, len, THESEUS_P2P_KIND_DATA, x.dtype);
        st[THESEUS_P2P_STATE_CHUNKS] = sent + 1;
        p2p_port_publish(c, pr, ch, k, len, THESEUS_P2P_KIND_DATA, tseq);
      }
      sent++;
    }
  }
  bar();
  return !s_fail;
}

// p2p_recv_port reads channel ch of the transfers from a peer on another
// node (p2p_recv_peer's FIFO path, waiting on the arrival word).
NOINLINE bool p2p_recv_port(const Ctx& c, int ch, const theseus_p2p_peer& pr) {
  const theseus_p2p_launch& P = s_p2p;
  const i64 C = P.chunk_bytes;
  const u64 N = (u64)P.slots;
  char* local = (char*)pr.local;
  char* remote = (char*)pr.remote;
  u64* st = p2p_state(local, ch, 1);
  const u64* arrived = &st[THESEUS_P2P_STATE_ARRIVED];
  u64* post = p2p_post(remote, ch);
  const int q = pr.peer;
  u64 recvd = st[THESEUS_P2P_STATE_CHUNKS], trecv = st[THESEUS_P2P_STATE_TRANSFERS];
  bar();  // every thread has read the state before thread 0 moves it
  const theseus_p2p_xfer* xs = (const theseus_p2p_xfer*)P.xfers + pr.first;
  for (u32 i = 0; i < pr.nxfer; i++) {
    const theseus_p2p_xfer& x = xs[i];
    const u64 tseq = ++trecv;
    if (tid() == 0) st[THESEUS_P2P_STATE_TRANSFERS] = trecv;
    i64 total;
    char* dst;
    p2p_resolve(x, q, true, total, dst);
    const int used = p2p_used(total);
    if (ch >= used) continue;
    for (i64 j = ch; j * C < total; j += used) {
      const int k = (int)(recvd % N);
      u64* hdr = p2p_hdr(local, ch, k);
      if (tid() == 0) {
        const u64 want = recvd + 1;
        if (spin(c, [&] { return ld_poll_sys(arrived) >= want || p2p_port_failed(pr, ch); }, THESEUS_WAIT_P2P_HEADER, (i64)tseq, ch, q, want, arrived)) {
          const u64 flag = ld_poll_sys(&hdr[THESEUS_P2P_HDR_FLAG]);
          const u64 kd = ldv(&hdr[THESEUS_P2P_HDR_KIND]), sseq = ldv(&hdr[THESEUS_P2P_HDR_TSEQ]);
          const u64 kind = kd & 0xffffffffu;
          const u32 sdt = (u32)(kd >> 32);
          const i64 stot = (i64)ldv(&hdr[THESEUS_P2P_HDR_TOTAL]);
          if (ld_poll_sys(arrived) < want) {
            fail(c, THESEUS_ERR_PORT, THESEUS_WAIT_P2P_HEADER, (i64)tseq, ch, q, 0, want);
          } else if (flag < want) {  // the signal before its header: the proxy's ordering is broken
            fail(c, THESEUS_ERR_BADREF, THESEUS_WAIT_P2P_HEADER, (i64)tseq, ch, q, flag, want);
          } else if (kind == THESEUS_P2P_KIND_ABORT) {
            fail(c, THESEUS_ERR_P2P_PEER, THESEUS_WAIT_P2P_HEADER, (i64)tseq, 0, q, 0, 0);
          } else if (kind == THESEUS_P2P_KIND_ERROR) {
            fail(c, THESEUS_ERR_P2P_MISMATCH, THESEUS_P2P_BY_SENDER, (i64)tseq, (i64)(sdt << 8 | x.dtype), q, (u64)stot, (u64)total);
          } else if (sseq != tseq || stot != total || sdt != x.dtype) {
            stv(&post[THESEUS_P2P_POST_TOTAL], (u64)total);
            stv(&post[THESEUS_P2P_POST_TYPE], x.dtype | (u64)THESEUS_P2P_POST_ERROR << 32);
            fence_sys();
            st_release_sys(&post[THESEUS_P2P_POST_TSEQ], tseq);
            p2p_port_post_line(c, pr, ch, tseq);
            fail(c, THESEUS_ERR_P2P_MISMATCH, THESEUS_P2P_RECEIVER, (i64)tseq, (i64)(sdt << 8 | x.dtype), q, (u64)stot, (u64)total);
          } else {
            s_poff = (i64)ldv(&hdr[THESEUS_P2P_HDR_OFF]);
            s_plen = (i64)ldv(&hdr[THESEUS_P2P_HDR_LEN]);
            if (kind != THESEUS_P2P_KIND_DATA || s_poff != j * C || s_plen != (total - s_poff < C ? total - s_poff : C))
              fail(c, THESEUS_ERR_BADREF, THESEUS_WAIT_P2P_HEADER, (i64)tseq, ch, q, (u64)s_poff, (u64)(j * C));
          }
          fence_sys();
        }
      }
      bar();
      if (s_fail) return false;
      const i64 off = s_poff, len = s_plen;
      bar();  // every thread has them before thread 0 may write the next
      copy_bytes(dst + off, p2p_data(local, ch, k), len);
      bar();  // every thread's reads of the slot before the credit
      recvd++;
      if (tid() == 0) {
        st[THESEUS_P2P_STATE_CHUNKS] = recvd;
        p2p_port_op(c, pr, ch, 1, THESEUS_PORT_SIGNAL, 0, 0, tseq);
      }
    }
  }
  bar();
  return !s_fail;
}

// p2p_poison_port is p2p_poison for a peer on another node: the abort
// header put and signalled, the abort post put and flushed. Thread 0.
NOINLINE void p2p_poison_port(const Ctx& c, int ch, bool recv, const theseus_p2p_peer& pr) {
  const theseus_p2p_launch& P = s_p2p;
  char* local = (char*)pr.local;
  char* remote = (char*)pr.remote;
  if (!recv) {
    u64* st = p2p_state(local, ch, 0);
    const u64 sent = st[THESEUS_P2P_STATE_CHUNKS];
    if (sent - ld_poll_sys(p2p_credit(local, ch)) >= (u64)P.slots) return;
    const int k = (int)(sent % (u64)P.slots);
    p2p_publish(p2p_hdr(remote, ch, k), sent + 1, 0, 0, 0, 0, THESEUS_P2P_KIND_ABORT, 0);
    st[THESEUS_P2P_STATE_CHUNKS] = sent + 1;
    p2p_port_publish(c, pr, ch, k, 0, THESEUS_P2P_KIND_ABORT, 0);
    return;
  }
  u64* post = p2p_post(remote, ch);
  if ((ldv(&post[THESEUS_P2P_POST_TYPE]) >> 32) == THESEUS_P2P_POST_ERROR) return;
  stv(&post[THESEUS_P2P_POST_TYPE], (u64)THESEUS_P2P_POST_ABORT << 32);
  fence_sys();
  st_release_sys(&post[THESEUS_P2P_POST_TSEQ], THESEUS_P2P_ABORT_SEQ);
  p2p_port_post_line(c, pr, ch, 0);
}

// ---- (end of the peers on other nodes)

// p2p_poison tells the peers of lane (send or receive lane ch) that this
// launch failed, so that theirs fail at once: an abort header where a slot
// is free, an abort post where no error post is. Thread 0.
DEV void p2p_poison(const Ctx& c, int ch, bool recv) {
  const theseus_p2p_launch& P = s_p2p;
  const theseus_p2p_peer* peers = (const theseus_p2p_peer*)P.peers + (recv ? P.nsend : 0);
  const int np = recv ? P.nrecv : P.nsend;
  for (int i = 0; i < np; i++) {
    if (peers[i].nlanes) {  // a peer on another node
      p2p_poison_port(c, ch, recv, peers[i]);
      continue;
    }
    char* local = (char*)peers[i].local;
    char* remote = (char*)peers[i].remote;
    if (!recv) {
      u64* st = p2p_state(local, ch, 0);
      const u64 sent = st[THESEUS_P2P_STATE_CHUNKS];
      if (sent - ld_poll_sys(p2p_credit(local, ch)) >= (u64)P.slots) continue;
      p2p_publish(p2p_hdr(remote, ch, (int)(sent % (u64)P.slots)), sent + 1, 0, 0, 0, 0, THESEUS_P2P_KIND_ABORT, 0);
      st[THESEUS_P2P_STATE_CHUNKS] = sent + 1;
    } else {
      u64* post = p2p_post(remote, ch);
      if ((ldv(&post[THESEUS_P2P_POST_TYPE]) >> 32) == THESEUS_P2P_POST_ERROR) continue;
      stv(&post[THESEUS_P2P_POST_TYPE], (u64)THESEUS_P2P_POST_ABORT << 32);
      fence_sys();
      st_release_sys(&post[THESEUS_P2P_POST_TSEQ], THESEUS_P2P_ABORT_SEQ);
    }
  }
}

// theseus_p2p_bases does nothing: its presence marks a module whose
// theseus_p2p adds the launch's buffer offsets (p2p_base), so that the
// backend may rebase its launches (cuda/p2p.go; a module built before it,
// through THESEUS_PTX_DIR, lacks it and its launches are prepared for
// every call's buffers).
extern "C" __global__ void theseus_p2p_bases() {}

// theseus_p2p is the engine's entry: grid 2 x channels, launch.p2p the
// launch's descriptor. It uses no scratch, no fence and no done word: its
// launches are not the communicator's counted launches.
extern "C" __global__ void __launch_bounds__(THESEUS_P2P_MAX_THREADS) theseus_p2p(theseus_launch launch) {
  __shared__ Ctx s_pctx;  // only L and tb: what fail and spin read
  if (tid() == 0) {
    s_launch = launch;
    s_fail = 0;
    s_p2p = *(const theseus_p2p_launch*)launch.p2p;
    s_pctx = Ctx{};
    s_pctx.L = &s_launch;
    s_pctx.tb = bid();
  }
  bar();
  const Ctx& c = s_pctx;
  const theseus_p2p_launch& P = s_p2p;
  const int k = P.channels;
  const int lane = (int)bid();
  const bool recv = lane >= k;
  const int ch = recv ? lane - k : lane;
  // This lane's help record (launch counts: the receive lane's own, every launch).
  u64* help = p2p_help(ch);
  u64 nlaunch = 0;
  if (help && recv && tid() == 0) {
    nlaunch = ldv(&help[P2P_H_LAUNCH]) + 1;
    stv(&help[P2P_H_LAUNCH], nlaunch);
  }
  bool ok = P.matrix == 0 || p2p_matrix(c);
  if (ok && !recv) {
    for (int i = 0; i < P.nself; i++) {
      const theseus_p2p_copy& cp = ((const theseus_p2p_copy*)P.selfs)[i];
      i64 n = (i64)cp.bytes;
      const char* src = (const char*)(cp.src + p2p_base(false));
      char* dst = (char*)(cp.dst + p2p_base(true));
      if (cp.matrix) {
        const int me = launch.rank;
        n = s_row[me + 1] - s_row[me];
        src += s_row[me];
        dst += s_col[me];
      }
      const int used = p2p_used(n);
      if (ch >= used || src == dst) continue;
      for (i64 j = ch; j * P.chunk_bytes < n; j += used) {
        const i64 lo = j * P.chunk_bytes, len = n - lo < P.chunk_bytes ? n - lo : P.chunk_bytes;
        copy_bytes(dst + lo, src + lo, len);
      }
    }
    const theseus_p2p_peer* peers = (const theseus_p2p_peer*)P.peers;
    for (int i = 0; ok && i < P.nsend; i++) ok = peers[i].nlanes ? p2p_send_port(c, ch, peers[i]) : p2p_send_peer(c, ch, peers[i]);
  } else if (ok) {
    const theseus_p2p_peer* peers = (const theseus_p2p_peer*)P.peers + P.nsend;
    if (tid() == 0)
      for (int i = 0; i < P.nrecv; i++)
        if (!peers[i].nlanes)  // (across nodes nothing reads the post)
          p2p_post_next(peers[i], ch, 0, p2p_state((char*)peers[i].local, ch, 1)[THESEUS_P2P_STATE_TRANSFERS] + 1);
    bar();
    for (int i = 0; ok && i < P.nrecv; i++) ok = peers[i].nlanes ? p2p_recv_port(c, ch, peers[i]) : p2p_recv_peer(c, ch, peers[i]);
    if (ok && help) p2p_help_rest(c, help, nlaunch);
  }
  bar();
  if (tid() == 0 && (!ok || s_fail || stop(c))) p2p_poison(c, ch, recv);
  if (tid() == 0 && help && !recv) st_release_gpu(&help[P2P_H_FIN], ldv(&help[P2P_H_FIN]) + 1);  // (after every piece of its jobs)
}

#endif  // THESEUS_DTYPE == 1
