package selector

import (
	"fmt"

	"github.com/theseus-ccl/theseus/ir"
)

// ScheduleLoader reads and verifies a schedule file. The selector calls it
// the first time a schedule would be selected (and again after a missing
// file, at the next epoch); the runtime plugs in the compiler
// (schedule JSON or MSCCL XML through compiler/passes, or a .tsb bundle).
type ScheduleLoader interface {
	// Load reads the file at path (absolute, or relative to the working
	// directory) and verifies it. An error wrapping fs.ErrNotExist means the
	// file is missing (the entry is retried at the next epoch); any other
	// error excludes the entry for good. Load must not block indefinitely.
	Load(path string) (*ScheduleInfo, error)
}

// ScheduleInfo is what the selector needs from a loaded schedule, plus what
// the executor needs, which the selector keeps for it.
type ScheduleInfo struct {
	Collective  ir.Collective
	NRanks      int
	NLocalRanks int   // ranks per node the schedule needs; 0: any
	MinBytes    int64 // message-size window in bytes (ir.MessageBytes); inclusive
	MaxBytes    int64 // inclusive; 0: unlimited
	InPlace     bool  // NCCL in-place arrangement supported
	OutOfPlace  bool
	Protocol    ir.Protocol
	// Program is the verified IR, when the loader has it.
	Program *ir.Program
	// Artifact is whatever the executor runs (e.g. a *bundle.Bundle); the
	// selector never looks inside.
	Artifact any
}

// LoadRequest is what the selector asks a RankLoader for: one entry's
// schedule, for one rank of a communicator of a given shape.
type LoadRequest struct {
	// Path is the schedule file of a file entry (as Load's path), or the
	// label of a generated one (manifest.Schedule.Label).
	Path string
	// Gen is a generated entry's recipe; nil for a file entry.
	Gen *GenSpec
	// Collective is the entry's.
	Collective ir.Collective
	// NRanks and NLocalRanks are the communicator's (ranks per node, 0 when
	// the nodes differ in size).
	NRanks, NLocalRanks int
	// Rank is the calling rank, 0..NRanks-1: a loader reads, checks and
	// builds only what that rank runs, as far as the schedule allows.
	Rank int
}

// GenSpec is a generated entry's recipe, resolved for the request's shape
// (docs/selection-context.md §5.5).
type GenSpec struct {
	// Algorithm is a compiler/gen algorithm (name or alias).
	Algorithm string
	Protocol  ir.Protocol
	// Channels is the most lanes, 1..gen.MaxChannels: the loader takes the
	// largest of Channels, Channels/2, ..., 1 that the generator accepts.
	Channels int
	// Avoid lists ranks kept off relaying paths.
	Avoid []int
	// NLocalRanks is what the generator is given: the communicator's on
	// several nodes (every generator joins nodes with port channels, or
	// refuses) and for the hierarchical generator; else 0 (programs for any
	// node shape).
	NLocalRanks int
}

// RankLoader is a ScheduleLoader that loads for one rank of a communicator
// and can build generated entries. The selector calls LoadFor instead of
// Load when its loader has it; a loader without it cannot serve generated
// entries (they fail to load).
type RankLoader interface {
	ScheduleLoader
	LoadFor(req LoadRequest) (*ScheduleInfo, error)
}

// LoaderFunc adapts a function to ScheduleLoader.
type LoaderFunc func(path string) (*ScheduleInfo, error)

// Load implements ScheduleLoader.
func (f LoaderFunc) Load(path string) (*ScheduleInfo, error) { return f(path) }

// InfoOf describes a verified program.
func InfoOf(p *ir.Program) *ScheduleInfo {
	return &ScheduleInfo{Collective: p.Collective, NRanks: p.NRanks, NLocalRanks: p.NLocalRanks,
		MinBytes: p.MinBytes, MaxBytes: p.MaxBytes, InPlace: p.InPlace, OutOfPlace: p.OutOfPlace,
		Protocol: p.Protocol, Program: p}
}

// noLoader is used when Options.Loader is nil: every schedule fails to load.
type noLoader struct{}

func (noLoader) Load(path string) (*ScheduleInfo, error) {
	return nil, fmt.Errorf("no schedule loader configured (Options.Loader) for %s", path)
}
