// Package bundle is the .tsb schedule bundle: everything the runtime needs
// to run one compiled schedule on every rank, in one versioned, checksummed
// file. A bundle holds
//
//   - the program's metadata (name, collective, nranks, ranks per node,
//     root, protocol, chunks per block, buffer arrangements, message-size
//     window, threads, slice bytes);
//   - per rank, the resource summary that compiler/diff and the runtime's
//     delta migration need (buffer sizes in chunks, channel ends, imported
//     buffer registrations, and per threadblock the op count and a hash of
//     its ops);
//   - an index of the per-rank sections: each section's offset, length and
//     SHA-256;
//   - per rank, its section: the operation table (codegen/optable bytes,
//     opaque here);
//   - optionally, the canonical source: the textual IR (ir.Print) of the
//     program as it was compiled, so `theseusc print` and `theseusc diff`
//     work from a bundle alone.
//
// The schedule's identity (ID) is the SHA-256 of the magic, the version and
// the head (metadata, resources and the section index, which holds every
// section's SHA-256), so it covers every table. The embedded source and
// the verified flag are not part of the identity: they describe the
// schedule but do not change what runs, so a bundle built with and without
// them has the same ID. The source carries its own SHA-256.
//
// The binary layout is specified in docs/bundle.md. Encode writes it;
// Decode reads and validates all of it (magic, version, every length
// against the bytes left, every enum and index range, channel pairing, every
// hash, no trailing bytes) and never panics. Open reads only the header and
// the head, and then each section when a rank's table is asked for (Table,
// TableBytes), checking that section's hash: a rank of a 1024-rank job
// reads its own 0.5 MB instead of the whole 571 MB. The encoding is
// canonical: a byte string Decode accepts re-encodes to itself.
package bundle

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"sync"

	"github.com/theseus-ccl/theseus/ir"
)

// Magic is the first 8 bytes of every bundle.
const Magic = "TSBUNDLE"

// Version is the format version this package writes and reads (version 1,
// the whole-body layout without a section index, is no longer read:
// recompile such a bundle with theseusc compile).
const Version = 2

// Limits that Decode enforces (docs/bundle.md).
const (
	HeaderBytes = 56   // magic, version, flags, reserved, head length, ID
	MaxName     = 4096 // bytes of Meta.Name
	MaxThreads  = 1 << 16
)

// Errors returned (wrapped) by Decode and Encode.
var (
	// ErrFormat: the bytes are not a well-formed bundle (bad magic, a
	// length past the end, a value out of range, trailing bytes).
	ErrFormat = errors.New("bundle: malformed")
	// ErrVersion: a bundle of a version this package does not read.
	ErrVersion = errors.New("bundle: unsupported version")
	// ErrChecksum: the stored ID or source hash does not match the contents.
	ErrChecksum = errors.New("bundle: checksum mismatch")
	// ErrInvalid: Encode was given a Bundle whose fields are out of range.
	ErrInvalid = errors.New("bundle: invalid")
)

// ID is a schedule's identity: the SHA-256 of its bundle's magic, version
// and body (docs/bundle.md). Two bundles have the same ID exactly when they
// run the same schedule with the same metadata.
type ID [32]byte

// String is the ID in lower-case hex (64 characters).
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// Short is the first 12 hex characters, for display.
func (id ID) Short() string { return id.String()[:12] }

// Meta is the program-level metadata of a bundle; the fields mean what the
// ir.Program fields of the same name mean.
type Meta struct {
	Name        string // at most MaxName bytes of UTF-8
	Collective  ir.Collective
	NRanks      int // 1..ir.MaxRanks
	NLocalRanks int // ranks per node the program needs, 0 (any)..NRanks
	// Root is the root the program is written for: 0..NRanks-1 for rooted
	// collectives, -1 otherwise.
	Root           int
	Protocol       ir.Protocol
	ChunksPerBlock int64 // >= 1
	InPlace        bool  // at least one of InPlace and OutOfPlace
	OutOfPlace     bool
	MinBytes       int64 // message-size window in bytes: 0 <= MinBytes,
	MaxBytes       int64 // MaxBytes 0 (unlimited) or >= MinBytes
	NumThreads     int   // threads per threadblock, 0 (default)..MaxThreads
	SliceBytes     int64 // bytes per chunk per slice, 0 (default) or more
}

// MetaOf returns p's metadata. A root set on a collective that has none is
// dropped (-1): the verifier reports it as ignored (TS0114, a warning).
func MetaOf(p *ir.Program) Meta {
	root := p.Root
	if !p.Collective.Rooted() {
		root = -1
	}
	return Meta{Name: p.Name, Collective: p.Collective, NRanks: p.NRanks, NLocalRanks: p.NLocalRanks,
		Root: root, Protocol: p.Protocol, ChunksPerBlock: p.ChunksPerBlock, InPlace: p.InPlace,
		OutOfPlace: p.OutOfPlace, MinBytes: p.MinBytes, MaxBytes: p.MaxBytes, NumThreads: p.NumThreads,
		SliceBytes: p.SliceBytes}
}

// ChannelEnd is one channel end of a rank (ir.Channel without position):
// the other end is channel PeerChannel of rank Peer.
type ChannelEnd struct {
	Peer        int
	PeerChannel int
	Type        ir.ChannelType
	Init        int64 // initial inbound semaphore value, >= 0
}

// Registration says that a rank's ops name buffer Buf (ir.Input or
// ir.Output) of rank Peer through a channel, so the rank must import that
// buffer's registration before it runs. Scratch is not listed: it is the
// communicator's, imported once per connection.
type Registration struct {
	Peer int
	Buf  ir.BufKind
}

// TBSummary summarises one threadblock: its op count and OpsHash (HashOps),
// equal for two threadblocks whose ops are equal, and different otherwise
// up to 64-bit hash collisions.
type TBSummary struct {
	Ops     int
	OpsHash uint64
}

// RankResources is one rank's resource summary.
type RankResources struct {
	// Chunks are the declared buffer sizes in chunks, indexed by ir.BufKind
	// (input and output 0 = as the collective defines; scratch after
	// legalisation), each >= 0.
	Chunks        [ir.NumBufKinds]int64
	Channels      []ChannelEnd
	Registrations []Registration // sorted by (Peer, Buf), no duplicates
	TBs           []TBSummary
}

// Bundle is a decoded bundle.
type Bundle struct {
	Meta  Meta
	Ranks []RankResources // exactly Meta.NRanks
	// Tables are, per rank, the codegen/optable encoding; exactly
	// Meta.NRanks. In a bundle from Open, the sections not read yet are
	// nil: read them with TableBytes or Table (safe for concurrent use),
	// not from the slice.
	Tables [][]byte
	// Source is the canonical textual IR (ir.Print) of the program as it
	// was compiled, or nil when the bundle carries none (or was opened
	// with Open, which does not read it).
	Source []byte
	// Verified records that the whole program was proven where the bundle
	// was built: compiler/verify's every check on the program, and
	// codegen/optable's cross-rank checks on the tables (compiler/passes
	// sets it when verify-input ran and passed). A runtime may then check
	// only the sections it loads (Table); without it, CheckTables. Like
	// Source, it is not part of the ID.
	Verified bool
	// Kernels are the ranks' specialised kernels (Kernel), sorted by
	// (rank, datatype); not part of the ID. In a bundle from Open they are
	// nil: read them with Kernel.
	Kernels []Kernel

	lazy *lazySections // set by Open: the sections not read yet
	// kernelSrc, when set (SetKernelSource), gives the kernels instead of
	// Kernels or the kernels section.
	kernelSrc KernelSource
}

// lazySections reads the sections of an opened bundle (r), or builds those
// of a generated one (build), on demand.
type lazySections struct {
	mu   sync.Mutex
	r    io.ReaderAt
	off  []int64 // file offset of each rank's section
	len  []int64 // its length in bytes
	sums []ID    // its SHA-256, from the index (covered by the ID)
	// kernels are the kernels section's entries (Open), read on demand.
	kernels []lazyKernel

	build func(rank int) ([]byte, []TBSummary, error)
}

// NewLazy returns a bundle whose sections build writes on demand
// (TableBytes, Table, and everything that needs every table: CheckTables,
// ID, Encode): for a runtime that generates a schedule for its
// communicator's shape and lowers only the ranks it runs. meta and ranks
// are what New would give, except that a rank's TBs may be nil until
// build(rank) returns them with the rank's table (build is called at most
// once per rank, never concurrently). verified is Bundle.Verified. Errors
// (ErrInvalid): those of Validate.
func NewLazy(meta Meta, ranks []RankResources, verified bool, build func(rank int) ([]byte, []TBSummary, error)) (*Bundle, error) {
	b := &Bundle{Meta: meta, Ranks: ranks, Tables: make([][]byte, len(ranks)), Verified: verified,
		lazy: &lazySections{build: build}}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return b, nil
}

// Summarize returns the per-rank resource summary of p, which should be at
// the primitive level (after legalisation): the summary of a transfer-level
// program lists only its declared channels. Refs through a channel index p
// does not have are skipped (the verifier reports them).
func Summarize(p *ir.Program) []RankResources {
	out := make([]RankResources, len(p.Ranks))
	for r := range p.Ranks {
		out[r] = SummarizeRank(&p.Ranks[r])
	}
	return out
}

// SummarizeRank is one rank's entry of Summarize.
func SummarizeRank(rk *ir.Rank) RankResources {
	var res RankResources
	res.Chunks = rk.Chunks
	res.Channels = make([]ChannelEnd, len(rk.Channels))
	for c, ch := range rk.Channels {
		res.Channels[c] = ChannelEnd{Peer: ch.Peer, PeerChannel: ch.PeerChannel, Type: ch.Type, Init: ch.Init}
	}
	res.TBs = make([]TBSummary, len(rk.TBs))
	for t := range rk.TBs {
		ops := rk.TBs[t].Ops
		res.TBs[t] = TBSummary{Ops: len(ops), OpsHash: HashOps(ops)}
	}
	res.Registrations = Registrations(rk)
	return res
}

// Registrations returns the buffer registrations rank rk's ops import
// (RankResources.Registrations): sorted, unique, nil when none. Legalisation
// adds only refs to scratch, so a transfer-level rank imports what its
// legalised form does.
func Registrations(rk *ir.Rank) []Registration {
	var regs []Registration
	for t := range rk.TBs {
		ops := rk.TBs[t].Ops
		for i := range ops {
			regs = appendRegs(regs, rk.Channels, ops[i].Srcs)
			regs = appendRegs(regs, rk.Channels, ops[i].Dsts)
		}
	}
	slices.SortFunc(regs, cmpReg)
	regs = slices.Compact(regs)
	if len(regs) == 0 {
		return nil
	}
	return slices.Clip(regs)
}

func appendRegs(regs []Registration, chans []ir.Channel, refs []ir.Ref) []Registration {
	for _, ref := range refs {
		if ref.Chan < 0 || ref.Chan >= len(chans) || (ref.Buf != ir.Input && ref.Buf != ir.Output) {
			continue
		}
		reg := Registration{Peer: chans[ref.Chan].Peer, Buf: ref.Buf}
		if n := len(regs); n > 0 && regs[n-1] == reg {
			continue
		}
		regs = append(regs, reg)
	}
	return regs
}

func cmpReg(a, b Registration) int {
	if a.Peer != b.Peer {
		if a.Peer < b.Peer {
			return -1
		}
		return 1
	}
	return int(a.Buf) - int(b.Buf)
}

// HashOps is a 64-bit hash of the ops' canonical contents, for telling
// changed threadblocks apart (docs/bundle.md, "Op hash"): every op
// contributes, as 64-bit words, its opcode and flags, count, barrier id and
// participants, and the length and elements of its srcs, dsts, chans and
// deps; each word w is mixed in as h = (h ^ w) · 0x9E3779B97F4A7C15,
// h ^= h >> 29, from h = 0xcbf29ce484222325. Positions are not hashed. It
// is not a cryptographic hash.
func HashOps(ops []ir.Op) uint64 {
	h := opHasher(0xcbf29ce484222325)
	for i := range ops {
		op := &ops[i]
		w := uint64(op.Code)
		if op.Publish {
			w |= 1 << 8
		}
		h.mix(w)
		h.mix(uint64(op.Count))
		h.mix(uint64(uint32(op.Barrier)) | uint64(uint32(op.BarrierTBs))<<32)
		h.refs(op.Srcs)
		h.refs(op.Dsts)
		h.mix(uint64(len(op.Chans)))
		for _, c := range op.Chans {
			h.mix(uint64(c))
		}
		h.mix(uint64(len(op.Deps)))
		for _, d := range op.Deps {
			h.mix(uint64(uint32(d.TB)) | uint64(uint32(d.Step))<<32)
		}
	}
	return uint64(h)
}

type opHasher uint64

func (h *opHasher) mix(w uint64) {
	x := (uint64(*h) ^ w) * 0x9E3779B97F4A7C15
	*h = opHasher(x ^ x>>29)
}

func (h *opHasher) refs(rs []ir.Ref) {
	h.mix(uint64(len(rs)))
	for _, r := range rs {
		w := uint64(r.Buf) | uint64(uint32(r.Chan))<<32
		if r.Packet {
			w |= 1 << 8
		}
		h.mix(w)
		h.mix(uint64(r.Off))
	}
}

// New assembles the bundle of p, a primitive-level program, from its
// per-rank operation tables (tables[r] is rank r's codegen/optable
// encoding) and an optional source (nil for none; see Bundle.Source). The
// returned bundle shares tables and source with the caller. Errors
// (ErrInvalid): p is not at the primitive level, the number of tables is
// not p.NRanks, or a field is out of the ranges Encode accepts.
func New(p *ir.Program, tables [][]byte, source []byte) (*Bundle, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: no program", ErrInvalid)
	}
	if p.Level() != ir.LevelPrimitive {
		return nil, fmt.Errorf("%w: program %q has transfer ops; bundle the legalised program", ErrInvalid, p.Name)
	}
	if len(p.Ranks) != p.NRanks || len(tables) != p.NRanks {
		return nil, fmt.Errorf("%w: %d tables and %d ranks for nranks %d", ErrInvalid, len(tables), len(p.Ranks), p.NRanks)
	}
	b := &Bundle{Meta: MetaOf(p), Ranks: Summarize(p), Tables: tables, Source: source}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return b, nil
}

// ID returns the bundle's schedule identity: the SHA-256 of the magic, the
// version and the encoded head (docs/bundle.md), whose section index holds
// every table's SHA-256. Errors: those of Encode for an invalid bundle.
//
// It hashes every table (the sections of an opened bundle that were not
// read keep the hashes of its index) and the head, without building the
// body.
func (b *Bundle) ID() (ID, error) {
	if err := b.Validate(); err != nil {
		return ID{}, err
	}
	if b.lazy != nil && b.lazy.build != nil {
		if _, err := b.allTables(); err != nil { // a generated bundle has no index to take hashes from
			return ID{}, err
		}
	}
	sums := b.sectionSums()
	return headID(b.appendHead(nil, b.tableLens(), sums)), nil
}

// idHash is a SHA-256 that has absorbed the magic and the version.
func idHash() hash.Hash {
	h := sha256.New()
	var pre [10]byte
	copy(pre[:], Magic)
	binary.LittleEndian.PutUint16(pre[8:], Version)
	h.Write(pre[:])
	return h
}

// headID is the ID of a bundle whose head is head.
func headID(head []byte) ID {
	h := idHash()
	h.Write(head)
	var id ID
	h.Sum(id[:0])
	return id
}
