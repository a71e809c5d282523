package verify

// Limits. A program over one of them gets TS0110 (diag.Limits). The first
// four are limits of the executor; the others bound the verifier's own work
// so that a hostile program costs bounded time and memory
// (docs/verification.md, "Limits").
const (
	// MaxThreadblocks bounds the threadblocks of one rank: one CUDA block
	// each, all resident at once (a threadblock may spin on another).
	MaxThreadblocks = 128
	// MaxThreads bounds Program.NumThreads, the threads of one threadblock
	// (CUDA's per-block limit).
	MaxThreads = 1024
	// MaxChannels bounds the channel ends of one rank: one 64-bit inbound
	// semaphore each, 32 KiB per rank at most.
	MaxChannels = 4096
	// MaxTransferChannels bounds Threadblock.Chan, the channel index of a
	// transfer-level connection (0..31, as MSCCL XML files use).
	MaxTransferChannels = 32

	// MaxBufferChunks bounds one buffer of one rank, in chunks.
	MaxBufferChunks = 1 << 24
	// MaxTotalChunks bounds the chunks of all buffers of all ranks.
	MaxTotalChunks = 1 << 26
	// MaxOps bounds the ops of all ranks (each op is two nodes of the
	// happens-before graph, one per modelled iteration).
	MaxOps = 1 << 28
	// MaxWork bounds the chunk accesses of one iteration: the sum over data
	// ops of count × (srcs + dsts + 1).
	MaxWork = 1 << 28
)
