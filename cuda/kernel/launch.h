// The launch arguments of the generic executor kernel, shared by the kernel
// (cuda/kernel/executor.cuh) and the Go side (package cuda, through cgo).
// docs/design/runtime.md "Launch" describes them; docs/design/ir.md says what
// a launch computes. Plain C, no CUDA headers.
#ifndef THESEUS_LAUNCH_H
#define THESEUS_LAUNCH_H

#ifdef __cplusplus
#include <cstdint>
#else
#include <stdint.h>
#endif

/* Error codes in theseus_error.code (0: no error). */
#define THESEUS_ERR_TIMEOUT 1u  /* a wait passed timeout_ns */
#define THESEUS_ERR_ABORTED 2u  /* the abort word was set (ncclCommAbort) */
#define THESEUS_ERR_BADREF 3u   /* a ref outside its buffer (never for verified tables) */
#define THESEUS_ERR_BADOP 4u    /* an opcode the kernel does not know */
#define THESEUS_ERR_TOOMANYREFS 5u /* an op with more than THESEUS_MAX_REFS refs */
/* The point-to-point engine's (p2p.cuh). channel is the peer rank, step the
 * transfer's number on the pair (1-based), what THESEUS_P2P_*. */
#define THESEUS_ERR_P2P_MISMATCH 6u /* a send and its receive disagree; have: the peer's bytes, want: this rank's,
                                       slice: peer's datatype << 8 | this rank's */
#define THESEUS_ERR_P2P_MATRIX 7u   /* AlltoAllv: the GPU matrix past the CPU one's totals (have, want: bytes;
                                       slice: 0 send, 1 receive) or, checking, a cell that differs (step: the cell;
                                       have: GPU, want: CPU) */
#define THESEUS_ERR_P2P_PEER 8u     /* the peer's launch failed (it reports the cause) */
#define THESEUS_ERR_PORT 9u     /* the proxy failed the connection (its error names the ranks and UCX's status), or a port op it cannot run */

/* The executor's launch bound (__launch_bounds__ of theseus_exec, theseus_units,
 * theseus_spec and theseus_resident): the most threads per threadblock of its
 * launches, which leaves it up to 128 registers a thread, so that its op loop
 * does not spill to local memory as it did at 1024 threads and 64 registers
 * (cuda clamps every launch to it: prepare.go, execThreads). */
#define THESEUS_EXEC_MAX_THREADS 512

/* The most srcs + dsts one op may have (the kernel stages their addresses in
 * shared memory). */
#define THESEUS_MAX_REFS 128

/* What a failed wait was waiting for (theseus_error.what). */
#define THESEUS_WAIT_SEMAPHORE 1u
#define THESEUS_WAIT_DEPENDENCY 2u
#define THESEUS_WAIT_BARRIER 3u
#define THESEUS_WAIT_PACKET 4u
#define THESEUS_WAIT_EPILOGUE 5u
#define THESEUS_WAIT_FENCE 6u
#define THESEUS_WAIT_PAIR 7u /* a peer's started word (the pairing wait) */
/* The point-to-point engine's waits and what its failures say (p2p.cuh). */
#define THESEUS_WAIT_P2P_CREDIT 8u  /* a free slot of the peer's FIFO */
#define THESEUS_WAIT_P2P_POST 9u    /* the peer's post of its receive */
#define THESEUS_WAIT_P2P_HEADER 10u /* the peer's next header */
#define THESEUS_P2P_SENDER 11u      /* mismatch found by this rank's send (the post) */
#define THESEUS_P2P_RECEIVER 12u    /* mismatch found by this rank's receive (a header) */
#define THESEUS_P2P_BY_RECEIVER 13u /* the peer's receive found it (an error post) */
#define THESEUS_P2P_BY_SENDER 14u   /* the peer's send found it (an error header) */
#define THESEUS_P2P_ORDER 15u       /* the peer's receive posted another transfer first */
#define THESEUS_P2P_CAPACITY 16u
#define THESEUS_P2P_CHECK 17u
#define THESEUS_WAIT_PORT 18u    /* the proxy: a free FIFO slot, or the completion of a descriptor */
#define THESEUS_WAIT_P2P_HELP 19u /* the point-to-point engine: a send lane waits for the pieces of its direct copy
                                     that this rank's helping threadblocks took (p2p.cuh) */
#define THESEUS_WAIT_P2P_FIFO 20u /* the point-to-point engine across nodes: a free slot of the proxy's FIFO
                                     (THESEUS_ERR_PORT: the proxy failed the connection) */

/* The first failure of a launch, written once (code first, by atomic CAS) to
 * host-mapped memory the communicator reads for ncclCommGetAsyncError. */
typedef struct theseus_error {
  uint32_t code;     /* THESEUS_ERR_* */
  uint32_t what;     /* THESEUS_WAIT_* */
  int32_t rank;      /* physical rank */
  int32_t tb;        /* threadblock */
  int64_t step;      /* op index in the threadblock */
  int64_t slice;
  int32_t channel;   /* channel end (semaphore waits), dependency tb, or barrier id */
  uint32_t reserved;
  uint64_t launch;   /* the launch counter */
  uint64_t have;     /* the value seen */
  uint64_t want;     /* the value waited for */
} theseus_error;

/* One channel end as the kernel sees it (device memory, one per channel of
 * the table; peer_buf's input and output are rewritten in place when the
 * peer pushes new buffers: executor level L2, device.Rebinder). */
typedef struct theseus_chan_rt {
  /* The peer's input, output and scratch bases in this process's address
   * space (IPC-mapped). The scratch base is the start of the peer's whole
   * scratch; the launch's half is added by the kernel. */
  uint64_t peer_buf[3];
  uint64_t peer_inbound;  /* uint64_t* : the other end's inbound semaphore */
  uint64_t inbound;       /* uint64_t* : this end's inbound semaphore */
  uint64_t expected;      /* uint64_t* : this end's expected counter (persistent) */
  int32_t peer_phys;      /* the peer's physical rank (root rotation) */
  int32_t port;           /* 0: a mapped end; else 1 + its index in theseus_port_launch.ends */
} theseus_chan_rt;

/* The kernel's single by-value argument. */
typedef struct theseus_launch {
  uint64_t table;        /* const uint8_t* : the rank's encoded op table (optable.h) */
  uint64_t chans;        /* const theseus_chan_rt* : one per channel end */
  uint64_t buf[3];       /* this rank's input, output and scratch (whole) bases; the point-to-point
                            engine's (theseus_p2p): buf[0] and buf[1] are byte offsets added to its
                            send-side and receive-side buffers (0 unless rebased: cuda/p2p.go) */
  uint64_t publish;      /* uint64_t* : one dependency counter per threadblock (persistent) */
  uint64_t barriers;     /* uint64_t* : barrier words, THESEUS_BARRIER_WORDS per barrier id, plus the epilogue's */
  uint64_t error;        /* theseus_error* (host-mapped; plain stores, code last) */
  uint64_t claim;        /* uint32_t* (device memory, zeroed by the executor): first failure claims it */
  uint64_t abort_word;   /* const volatile uint32_t* ; nonzero stops every wait */
  uint64_t done;         /* uint64_t* : this rank's done word; the last threadblock stores launch (0: none) */
  uint64_t finish;       /* uint64_t* : device counter of finished threadblocks (persistent) */
  uint64_t fence;        /* const uint64_t* const* : nfence peer done words; wait until each >= this rank's done word */
  uint64_t units;        /* const theseus_run* : shared work, nruns runs (0: none; each threadblock walks its own ops) */
  uint64_t unit_ctr;     /* uint64_t[2]* : the next unit to take, (launch counter & 0xffffffff) << 32 | unit; threadblocks done */
  int64_t nunits;        /* units in all runs */
  int32_t nfence;
  int32_t nruns;         /* 1 to THESEUS_MAX_RUNS when units is set */
  int64_t count;         /* NCCL count: elements per block */
  int64_t stride;        /* elements per piece (ir.Layout.Stride) */
  int64_t slices;        /* S >= 1 */
  int64_t scratch_half;  /* bytes of one scratch half (LL, or alternating scratch); 0: no halves */
  uint64_t launch;       /* launch counter >= 1: LL flag, scratch half, dependency epoch */
  uint64_t timeout_ns;   /* bound of every wait */
  uint64_t started;      /* uint64_t* : this rank's started word (0: none); the first block raises it to launch */
  uint64_t hdone;        /* uint64_t* : this rank's finished word (0: none); the last block raises it to launch */
  uint64_t pair;         /* const uint64_t* const* : npair peers' started words; before reading the channel
                            records, wait until each >= launch (the peers' pushed buffers are bound) */
  int32_t npair;
  int32_t reserved2;
  int32_t rank;          /* physical rank */
  int32_t nranks;
  int32_t root;          /* request root (rooted collectives) */
  int32_t shift;         /* root rotation: physical = logical + shift (mod nranks) */
  uint8_t dtype;         /* ir.DataType */
  uint8_t redop;         /* ir.RedOp */
  uint8_t inplace;
  uint8_t ll8;           /* 1: LL8 packets, 0: LL16 */
  uint8_t elem_size;
  uint8_t reserved[3];
  uint64_t trace;        /* theseus_trace* (device memory): op records of a traced launch; 0: none.
                          * After the fields above, so that a kernel built before it (THESEUS_PTX_DIR) ignores it. */
  uint64_t p2p;          /* const theseus_p2p_launch* : the point-to-point engine's launch (theseus_p2p entry; 0 otherwise) */
  uint64_t port;         /* const theseus_port_launch* : port channels across nodes (0: none) */
} theseus_launch;

/* Port channels across nodes (docs/transport.md, "Integration"): the ends
 * whose peer is on another node go through the process's proxy. Their
 * theseus_chan_rt has port = 1 + the index of their theseus_port_rt in
 * theseus_port_launch.ends, peer_buf[k] the byte offset of the peer's
 * buffer k in its region (so that the kernel's address arithmetic yields
 * region offsets), inbound a word of pinned, device-mapped host memory the
 * proxy increments, and peer_inbound 0. A put is one descriptor posted into
 * the connection's FIFO (port.h) from a local ref of the same layout; the
 * kernel waits until the proxy is done with its source. */
typedef struct theseus_port_rt {
  uint64_t fifo;         /* theseus_port_ctrl* : the connection's FIFO (device-mapped host memory) */
  uint64_t head;         /* uint64_t* : its ticket counter (device memory) */
  uint64_t src_base[3];  /* device address of byte 0 of the region holding this rank's input, output, scratch */
  uint64_t mirror_base;  /* device address of this rank's scratch mirror (staged path), 0: none */
  uint16_t src_region[3];
  uint16_t channel;      /* the connection's channel of this end */
  uint16_t dst_region[3];
  uint16_t mirror_region; /* the mirror as a region of the connection */
  uint16_t stage_region;  /* the kernel staging buffer (theseus_port_launch.stage) as a region of the connection */
  uint16_t reserved[3];
} theseus_port_rt;

/* A fence with a peer on another node: signal channel, then wait until
 * inbound (host-mapped) reaches ++*expected. */
typedef struct theseus_port_fence {
  uint64_t fifo, head;
  uint64_t inbound, expected;
  uint32_t channel;
  int32_t peer;
} theseus_port_fence;

typedef struct theseus_port_launch {
  uint64_t ends;         /* const theseus_port_rt* */
  uint64_t fences;       /* const theseus_port_fence* : nfence of them */
  /* The staged path (a UCX build without CUDA support): peers on other
   * nodes put into the mirror, a copy of the scratch in pinned host memory;
   * the scratch chunks they write (bit i of mirror_map: chunk i) are read
   * and written there. 0: no mirror. */
  uint64_t mirror;       /* device address of the mirror's byte 0 */
  uint64_t mirror_map;   /* const uint32_t* */
  int64_t mirror_chunks; /* bits in mirror_map */
  int64_t mirror_bytes;  /* the mirror's size (the scratch's) */
  int32_t nfence;
  /* Kernel staging (the staged path, docs/transport.md "Staging vs
   * direct"): threadblock tb < stage_tbs copies what it puts from device
   * memory into its stage_tb_bytes of stage (pinned host memory mapped
   * into the device: byte tb x stage_tb_bytes on), in two halves used in
   * turn, and puts from there; the proxy makes no copy. 0: off (the
   * proxy stages). */
  int32_t stage_tbs;
  uint64_t stage;        /* device address of the staging buffer's byte 0 */
  int64_t stage_tb_bytes;
} theseus_port_launch;

/* The op records of traced launches (docs/trace.md): a header, then cap
 * records of THESEUS_TRACE_REC bytes. Thread 0 of each block reserves a
 * record with an atomic add on head at the end of each op and of the
 * block's launch; a record past cap is not written (head still counts
 * it). Times are %globaltimer nanoseconds; the host maps them to its
 * clock (cuda/trace.go). */
#define THESEUS_TRACE_HEADER 32
#define THESEUS_TRACE_REC 32
#define THESEUS_TRACE_LAUNCH 0xffffu /* step of a block's whole-launch record */
typedef struct theseus_trace {
  uint64_t head; /* records reserved so far */
  uint64_t cap;  /* records that fit */
  uint64_t reserved[2];
} theseus_trace;
typedef struct theseus_trace_rec {
  uint64_t begin;  /* the op's start (before its dependency waits), or the block's entry */
  uint64_t end;    /* after the op's closing barrier, or after the block's done word */
  uint32_t slice;  /* pipeline slice */
  uint16_t tb;     /* threadblock */
  uint16_t step;   /* the op's index in the threadblock; THESEUS_TRACE_LAUNCH for the launch */
  uint8_t op;      /* THESEUS_OP_* */
  uint8_t reserved[3];
  uint32_t launch; /* the launch counter's low 32 bits, written last: 0 while unwritten */
} theseus_trace_rec;

/* The argument of theseus_clock, which maps %globaltimer to the host's
 * clock (cuda/trace.go): thread 0 stores %globaltimer into *out
 * (host-mapped) over and over for ns nanoseconds. */
typedef struct theseus_clock_arg {
  uint64_t out; /* volatile uint64_t* , host-mapped */
  uint64_t ns;
} theseus_clock_arg;

/* One run of shared work (cuda/units.go, docs/design/cuda.md, "Shared
 * work"): a copy (nsrc 1) or a two-source reduce (nsrc 2) of nbytes, in a
 * launch whose ops are independent of each other, cut into units of tile
 * bytes (the last one shorter) numbered from first; each unit is taken by
 * whichever threadblock asks next. Offsets are bytes into this rank's
 * buffer buf[k] (THESEUS_BUF_*); src1 is unused when nsrc is 1. */
#define THESEUS_MAX_RUNS 32
typedef struct theseus_run {
  uint64_t off[3]; /* src0, src1, dst */
  uint64_t nbytes;
  uint64_t first;  /* the run's first unit */
  uint32_t tile;   /* bytes per unit, a multiple of 128 */
  uint8_t buf[3];  /* src0, src1, dst */
  uint8_t nsrc;
} theseus_run;

/* Barrier words: per barrier id, an arrival counter; per threadblock and
 * barrier id, that threadblock's arrivals so far. The epilogue barrier uses
 * id THESEUS_EPILOGUE_BARRIER. */
#define THESEUS_MAX_BARRIERS 32
#define THESEUS_EPILOGUE_BARRIER (THESEUS_MAX_BARRIERS - 1)

/* ---- The point-to-point engine (p2p.cuh; the contract is
 * runtime/launch/p2p.go, whose numbers cuda/p2p.go checks against these). A
 * connection block (one per rank and peer): the lane states (2 lines per
 * channel), the posts and credits (2 lines per channel), the FIFO headers
 * (channels x slots lines), then the slots' data from a 256-byte boundary. */
#define THESEUS_P2P_LINE 64
#define THESEUS_P2P_CHUNK_ALIGN 256
#define THESEUS_P2P_STATE_CHUNKS 0
#define THESEUS_P2P_STATE_TRANSFERS 1
#define THESEUS_P2P_STATE_ARRIVED 2
#define THESEUS_P2P_HDR_FLAG 0
#define THESEUS_P2P_HDR_TSEQ 1
#define THESEUS_P2P_HDR_TOTAL 2
#define THESEUS_P2P_HDR_OFF 3
#define THESEUS_P2P_HDR_LEN 4
#define THESEUS_P2P_HDR_KIND 5
#define THESEUS_P2P_HDR_WANT 6
#define THESEUS_P2P_HDR_WANTT 7
#define THESEUS_P2P_POST_TSEQ 0
#define THESEUS_P2P_POST_TOTAL 1
#define THESEUS_P2P_POST_TYPE 2
#define THESEUS_P2P_POST_ADDR 3
#define THESEUS_P2P_POST_GEN 4
#define THESEUS_P2P_KIND_DATA 1
#define THESEUS_P2P_KIND_DIRECT 2
#define THESEUS_P2P_KIND_ERROR 3
#define THESEUS_P2P_KIND_ABORT 4
#define THESEUS_P2P_POST_ERROR 1
#define THESEUS_P2P_POST_ABORT 2
#define THESEUS_P2P_ABORT_SEQ 0x7fffffffffffffffull
/* The most ranks whose AlltoAllv prefix sums the kernel keeps in shared
 * memory (runtime/comm.MaxAlltoAllvRanks). */
#define THESEUS_P2P_MAX_MATRIX 1024

/* One transfer: a send (buf the source) or a receive (buf the destination,
 * gen the id under which its allocation was offered to the peer, 0: none;
 * posted). matrix: bytes and the offset from buf come from the counts
 * matrix. */
typedef struct theseus_p2p_xfer {
  uint64_t buf;
  uint64_t bytes;
  uint64_t gen;
  uint32_t dtype;
  uint32_t matrix;
} theseus_p2p_xfer;

/* A peer's allocation (in its address space), offered under id gen, mapped
 * here at local. */
typedef struct theseus_p2p_import {
  uint64_t gen;
  uint64_t peer_base;
  uint64_t size;
  uint64_t local;
} theseus_p2p_import;

/* One peer in one direction: the connection blocks (this rank's, and the
 * peer's mapped here), its transfers and (sends) its imports. */
typedef struct theseus_p2p_peer {
  uint64_t local;
  uint64_t remote;
  int32_t peer;
  uint32_t first;     /* its transfers: xfers[first, first+nxfer) */
  uint32_t nxfer;
  uint32_t imp_first; /* imports[imp_first, imp_first+nimport) */
  uint32_t nimport;
  uint32_t reserved;
  /* A peer on another node (docs/p2p.md, "Across nodes"; nlanes 0: a peer
   * of this node): remote is this rank's copy of the peer's block (region
   * src_region of every lane's connection), whose records and chunks are put
   * into the peer's block (its region dst_region) at the same offsets through
   * a connection's FIFO (port.h): channel ch's through lane ch mod nlanes,
   * lanes[lane_first + ch mod nlanes] of the launch; local is pinned,
   * device-mapped host memory that the peer's puts and signals land in.
   * Channel ch's proxy channels (of its lane's connection) are
   * chans[chan_first + 2*ch] (arrival signals: puts of chunks and headers,
   * each header followed by a signal into the receiver's arrival word) and
   * chans[chan_first + 2*ch + 1] (credit signals, and the receiver's error
   * and abort posts). */
  uint32_t lane_first;
  uint32_t nlanes;
  uint64_t reserved2;
  uint32_t chan_first;
  uint16_t src_region;
  uint16_t dst_region;
} theseus_p2p_peer;

/* One lane of a peer on another node: a proxy connection's FIFO and the
 * ticket counter of its device producers. */
typedef struct theseus_p2p_lane {
  uint64_t fifo; /* theseus_port_ctrl* : the connection's FIFO (device-mapped host memory) */
  uint64_t head; /* uint64_t* : its ticket counter (device memory) */
} theseus_p2p_lane;

/* A self transfer (dst may equal src). */
typedef struct theseus_p2p_copy {
  uint64_t dst;
  uint64_t src;
  uint64_t bytes;
  uint32_t matrix;
  uint32_t reserved;
} theseus_p2p_copy;

/* One launch of the point-to-point engine (theseus_launch.p2p). */
typedef struct theseus_p2p_launch {
  uint64_t peers;   /* const theseus_p2p_peer* : nsend send peers, then nrecv receive peers, each in round order */
  uint64_t xfers;   /* const theseus_p2p_xfer* */
  uint64_t imports; /* const theseus_p2p_import* */
  uint64_t selfs;   /* const theseus_p2p_copy* : nself */
  uint64_t chans;   /* const uint16_t* : the proxy channels of the peers on other nodes (theseus_p2p_peer.chan_first) */
  uint64_t lanes;   /* const theseus_p2p_lane* : the lanes of the peers on other nodes (theseus_p2p_peer.lane_first) */
  uint64_t matrix;  /* const uint64_t* : the GPU counts matrix, nranks x nranks (0: not an AlltoAllv) */
  uint64_t check;   /* const uint64_t* : the CPU matrix's copy (checking mode; 0: off) */
  int64_t send_cap; /* bytes this rank sends and receives by the CPU matrix */
  int64_t recv_cap;
  int64_t elem_size;
  int64_t chunk_bytes;
  int64_t eager_bytes;
  int32_t slots;
  int32_t channels;
  int32_t nsend;
  int32_t nrecv;
  int32_t nself;
  int32_t direct;
  uint64_t help;    /* p2p.cuh's help records, THESEUS_P2P_HELP_BYTES per channel, in device memory zeroed at
                       prepare and kept by the prepared launch (0: no helping: idle lanes never copy) */
} theseus_p2p_launch;

/* Bytes of one channel's help record (p2p.cuh). */
#define THESEUS_P2P_HELP_BYTES 128
/* The most threads per threadblock of the point-to-point kernel (its
 * __launch_bounds__: up to 128 registers a thread, so that its code does not
 * spill at the executor's 64; cuda/p2p.go clamps a launch to it). */
#define THESEUS_P2P_MAX_THREADS 512

#endif /* THESEUS_LAUNCH_H */
