// The persistent executor's queue as the resident kernel sees it
// (executor.cuh, theseus_resident), shared with the Go side (package cuda,
// through cgo; the layout is runtime/resident's, which cuda's
// TestQueueLayout compares). docs/design/cuda.md, "The persistent
// executor". Plain C, no CUDA headers.
#ifndef THESEUS_QUEUE_H
#define THESEUS_QUEUE_H

#ifdef __cplusplus
#include <cstdint>
#else
#include <stdint.h>
#endif

#define THESEUS_Q_STOPPED 0u
#define THESEUS_Q_RUNNING 1u
#define THESEUS_Q_EXITING 2u
#define THESEUS_Q_MAX_BLOCKS 32

/* The status line, at the start of the queue's host memory. */
typedef struct theseus_qstatus {
  uint32_t state;      /* THESEUS_Q_*: the start / idle-exit handshake */
  uint32_t completed;  /* seq of the last item finished (kernel) */
  uint32_t issued;     /* seq of the last item issued (host) */
  uint32_t exit;       /* nonzero: exit as soon as idle (host) */
  uint32_t aborted;    /* nonzero: the kernel stopped on the abort word */
  uint32_t starts;     /* kernels started (host) */
  uint32_t blocks;     /* blocks of the running kernel that have started */
  uint32_t reserved[9];
  uint32_t smid[THESEUS_Q_MAX_BLOCKS]; /* per block of the last kernel started: its multiprocessor */
} theseus_qstatus;

/* One descriptor slot, after the status line: slot seq % nslots holds
 * item seq once seq is written (last). */
typedef struct theseus_qslot {
  uint64_t arg;     /* const theseus_launch* (device memory): the prepared launch */
  uint64_t launch;  /* the launch counter */
  int32_t nfence;   /* 0: not fenced */
  uint32_t seq;
  uint32_t grid;    /* threadblocks the launch runs on (<= the kernel's) */
  uint32_t flags;
  uint64_t in;      /* the launch's input and output bases (buf[0], buf[1]): a launch */
  uint64_t out;     /* rebased to other buffers shares its base's argument */
} theseus_qslot;

/* The resident kernel's by-value argument. */
typedef struct theseus_resident_args {
  uint64_t status;    /* theseus_qstatus* (host-mapped), followed by nslots theseus_qslot */
  uint64_t doorbell;  /* uint32_t[nslots] (device): seq of the last item released into each slot (cuStreamWriteValue32) */
  uint64_t done;      /* uint32_t* (device): seq of the last item finished (cuStreamWaitValue32 waits on it) */
  uint64_t dispatch;  /* uint64_t[2] (device): block 0's item for the other blocks; their count of finished blocks */
  uint64_t abort_word;/* const volatile uint32_t*: the communicator's abort word */
  uint64_t error;     /* theseus_error* (host-mapped): the queue's failure record */
  uint64_t claim;     /* uint32_t* (device): the first failure claims it */
  uint64_t idle_ns;   /* exit after this long without work (0: only on exit or abort) */
  uint32_t nslots;    /* a power of two */
  uint32_t first;     /* seq of the first item this kernel takes (completed + 1) */
  uint32_t instance;  /* this kernel's number (starts), tags the dispatch word */
  uint32_t reserved;
} theseus_resident_args;

#endif /* THESEUS_QUEUE_H */
