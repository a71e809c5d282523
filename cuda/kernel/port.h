// Port-channel FIFO: the memory contract between the producers of
// port-channel operations (GPU threadblocks, the host backend, Go code) and
// the per-process proxy that executes them over UCX (runtime/transport/proxy,
// docs/transport.md). C11/C++ and CUDA; the Go side (fifo.go) follows the
// same layout, checked by TestPortHeaderLayout.
//
// The FIFO lives in host memory (pinned and mapped into the device for GPU
// producers). Layout, little-endian, from the block's base:
//
//   [0, 64)    struct theseus_port_ctrl: tail, error, capacity
//   [64, 128)  head: the producers' ticket counter (uint64), for producers
//              that share the host block; GPU producers may keep their
//              ticket counter in device memory instead (one counter per
//              FIFO, never both)
//   [128, ...) capacity descriptors of 32 bytes (capacity a power of two)
//
// Protocol (ticket t = the t-th descriptor posted, from 0):
//   producer: t = atomic fetch-add(head, 1)
//             wait until t - tail < capacity (and error == 0)
//             write slot t % capacity: every field except seq
//             release fence (system scope on a GPU), then store seq = t + 1
//   proxy:    for its next ticket e: when slot e % capacity has seq == e + 1
//             (acquire load), read the slot, execute it, and store
//             tail = e + 1 with release once the operation is complete
//             enough (put/signal: issued; flush: complete at the peer)
//   A producer that needs completion (flush) waits until tail > t.
//   error becomes nonzero (before tail moves on) once the proxy failed this
//   FIFO's connection; from then on the proxy discards descriptors, so
//   waiters never block, and they must check error after each wait.
// seq values of consecutive laps differ (t + 1 mod 2^32 with capacity <=
// 2^24), so a slot never needs clearing.
#ifndef THESEUS_PORT_H
#define THESEUS_PORT_H

#include <stdint.h>

// Operation bits of theseus_port_desc.op, executed in this order.
enum {
  THESEUS_PORT_PUT = 1,     // size bytes: src region+src_off -> the peer's dst region+dst_off
  THESEUS_PORT_SIGNAL = 2,  // +1 to the channel's semaphore word at the peer, after the channel's earlier puts
  THESEUS_PORT_FLUSH = 4,   // complete once the channel's earlier puts and signals are complete at the peer
};

// One port-channel operation (32 bytes, 8-byte aligned).
typedef struct {
  uint64_t src_off;     // bytes into the local src region (PUT)
  uint64_t dst_off;     // bytes into the peer's dst region (PUT)
  uint32_t size;        // bytes to put (PUT), below 2^32
  uint16_t src_region;  // local region id (PUT)
  uint16_t dst_region;  // the peer's region id (PUT)
  uint16_t channel;     // port channel: the peer and its semaphore word
  uint8_t op;           // THESEUS_PORT_* bits
  uint8_t reserved;     // 0
  uint32_t seq;         // ticket + 1 (mod 2^32); stored last, with release
} theseus_port_desc;

typedef struct {
  uint64_t tail;      // descriptors completed (proxy; release)
  uint32_t error;     // 0, or nonzero once the connection failed (proxy)
  uint32_t capacity;  // slots, a power of two (set at creation)
  uint8_t pad[48];
} theseus_port_ctrl;

#define THESEUS_PORT_HEAD_OFFSET 64
#define THESEUS_PORT_RING_OFFSET 128
#define THESEUS_PORT_MAX_CAPACITY (1u << 24)

#ifdef __cplusplus
static_assert(sizeof(theseus_port_desc) == 32, "theseus_port_desc");
static_assert(sizeof(theseus_port_ctrl) == 64, "theseus_port_ctrl");
#else
_Static_assert(sizeof(theseus_port_desc) == 32, "theseus_port_desc");
_Static_assert(sizeof(theseus_port_ctrl) == 64, "theseus_port_ctrl");
#endif

#if defined(__CUDACC__) || defined(__CUDA__)
// Device-side producer (CUDA C++; needs no CUDA headers). One thread posts
// one descriptor. fifo is the block's device-mapped address; head is the
// FIFO's ticket counter in device memory (zero at creation). Returns the
// ticket, or ~0 when the proxy reported an error or *abort became nonzero
// while waiting for space (the caller records the failure and bounds the
// wait with its abort/timeout word, as every spin-wait of the executor
// kernel is bounded).
#define THESEUS_PORT_DEV __attribute__((device)) __attribute__((always_inline)) inline
THESEUS_PORT_DEV uint64_t theseus_port_post(theseus_port_ctrl* fifo, uint64_t* head, const theseus_port_desc* d,
                                            const volatile uint32_t* abort) {
  uint64_t t;
  asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(t) : "l"(head), "l"((uint64_t)1) : "memory");
  uint64_t cap = ((volatile theseus_port_ctrl*)fifo)->capacity;
  for (;;) {
    uint64_t tail;
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(tail) : "l"(&fifo->tail) : "memory");
    if (t - tail < cap) break;
    if (((volatile theseus_port_ctrl*)fifo)->error != 0 || *abort != 0) return ~(uint64_t)0;
  }
  theseus_port_desc* s = (theseus_port_desc*)((char*)fifo + THESEUS_PORT_RING_OFFSET) + (t & (cap - 1));
  volatile uint64_t* w = (volatile uint64_t*)s;
  w[0] = d->src_off;
  w[1] = d->dst_off;
  w[2] = (uint64_t)d->size | (uint64_t)d->src_region << 32 | (uint64_t)d->dst_region << 48;
  ((volatile uint32_t*)s)[6] = (uint32_t)d->channel | (uint32_t)d->op << 16;
  // The slot's fields reach host memory before seq does.
  asm volatile("fence.acq_rel.sys;" ::: "memory");
  asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(&s->seq), "r"((uint32_t)(t + 1)) : "memory");
  return t;
}

// theseus_port_done reports whether ticket t has completed (a flush:
// complete at the peer).
THESEUS_PORT_DEV bool theseus_port_done(const theseus_port_ctrl* fifo, uint64_t t) {
  uint64_t tail;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(tail) : "l"(&fifo->tail) : "memory");
  return tail > t;
}
#endif

#endif
