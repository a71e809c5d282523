// Package speckernels holds prebuilt specialised kernels (docs/specialize.md)
// for the generated schedules of the default selection context where they
// pay: the one-channel LL one-shot allreduce of 2, 4 and 8 ranks on one
// node (every message up to 2 KiB on one node; issue 25, item 4). The
// runtime generates those schedules for each communicator's shape
// (runtime/selector/schedfile), where clang is not at hand, so their
// kernels are built here ahead, by cmd/internal/genspec with clang-14 (go
// generate ./runtime/speckernels; .ci/run checks that they are current),
// and embedded: one PTX module per rank and datatype (float32, bfloat16,
// float16), each with the SHA-256 of the op table it was compiled from. A
// kernel is used only for a table with that hash (Set.Kernel), so a
// generator or lowering change that alters a table falls back to the
// generic executor instead of running a stale kernel.
//
// The archive is a zip file (archive/zip, deflate): index.json, then
// SHAPE/r<rank>-<datatype>.ptx for each shape of the index.
package speckernels

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/theseus-ccl/theseus/ir"
)

//go:generate go run ../../cmd/internal/genspec -o kernels.zip

//go:embed kernels.zip
var archive []byte

// Shape is one generated schedule: the generator's algorithm, collective,
// protocol and channels, for nranks ranks of which nlocalranks share a
// node (schedfile's generated entries, with no avoided rank; nlocalranks 0
// when every rank is on one node, as the selector asks for them).
type Shape struct {
	Algo        string
	Coll        ir.Collective
	Proto       ir.Protocol
	Channels    int
	NRanks      int
	NLocalRanks int
}

// String is the shape's name in the archive, for example
// "oneshot-allreduce-ll-c1-n2-l0".
func (s Shape) String() string {
	return fmt.Sprintf("%s-%v-%v-c%d-n%d-l%d", s.Algo, s.Coll, s.Proto, s.Channels, s.NRanks, s.NLocalRanks)
}

// Shapes are the shapes the archive holds (what cmd/internal/genspec
// builds): the default context's allreduce_oneshot_ll on one node.
var Shapes = []Shape{
	{Algo: "oneshot", Coll: ir.AllReduce, Proto: ir.LL, Channels: 1, NRanks: 2},
	{Algo: "oneshot", Coll: ir.AllReduce, Proto: ir.LL, Channels: 1, NRanks: 4},
	{Algo: "oneshot", Coll: ir.AllReduce, Proto: ir.LL, Channels: 1, NRanks: 8},
}

// DataTypes are the datatypes each rank has a module for.
var DataTypes = []ir.DataType{ir.Float32, ir.Bfloat16, ir.Float16}

// Index is the archive's index.json. Inputs is the SHA-256 (hex) of what
// the modules were compiled from besides the tables: the kernel sources
// and clang flags of cuda/kernel and every rank's translation unit
// (codegen/specialize.Source), which cmd/internal/genspec's test compares
// with today's without clang, so that `go test ./...` fails on a kernel
// source changed without go generate ./runtime/speckernels.
type Index struct {
	Inputs string       `json:"inputs"`
	Shapes []IndexShape `json:"shapes"`
}

// IndexShape is one shape's entry: its name (Shape.String), the SHA-256
// of each rank's op table (hex, rank order) and the datatypes built.
type IndexShape struct {
	Shape     string   `json:"shape"`
	Tables    []string `json:"tables"`
	DataTypes []string `json:"dtypes"`
}

// PTXName is the archive's name of rank's module for dt in shape.
func PTXName(shape string, rank int, dt ir.DataType) string {
	return fmt.Sprintf("%s/r%d-%v.ptx", shape, rank, dt)
}

// Set is one shape's kernels in the archive.
type Set struct {
	sums  [][sha256.Size]byte
	files map[string]*zip.File
	shape string
}

var (
	openOnce sync.Once
	sets     map[string]*Set
	openErr  error
)

// EmbeddedIndex is the embedded archive's index.
func EmbeddedIndex() (Index, error) { return ReadIndex(archive) }

// ReadIndex reads an archive's index.json.
func ReadIndex(data []byte) (Index, error) {
	_, idx, err := openArchive(data)
	return idx, err
}

// openArchive reads an archive's entries by name and its index.
func openArchive(data []byte) (map[string]*zip.File, Index, error) {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, Index{}, fmt.Errorf("speckernels: %w", err)
	}
	files := map[string]*zip.File{}
	for _, f := range zr.File {
		files[f.Name] = f
	}
	f := files["index.json"]
	if f == nil {
		return nil, Index{}, fmt.Errorf("speckernels: no index.json")
	}
	raw, err := readFile(f)
	if err != nil {
		return nil, Index{}, err
	}
	var idx Index
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, Index{}, fmt.Errorf("speckernels: index.json: %w", err)
	}
	return files, idx, nil
}

// open reads the archive's index once.
func open() (map[string]*Set, error) {
	openOnce.Do(func() { sets, openErr = Read(archive) })
	return sets, openErr
}

// Read reads an archive (the embedded one, or one genspec wrote) into its
// sets by shape name. Errors: a malformed zip or index, or an index entry
// without its modules.
func Read(data []byte) (map[string]*Set, error) {
	files, idx, err := openArchive(data)
	if err != nil {
		return nil, err
	}
	out := map[string]*Set{}
	for _, sh := range idx.Shapes {
		s := &Set{files: files, shape: sh.Shape}
		for r, h := range sh.Tables {
			var sum [sha256.Size]byte
			if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("speckernels: %s rank %d: table hash %q", sh.Shape, r, h)
			} else {
				copy(sum[:], b)
			}
			s.sums = append(s.sums, sum)
			for _, name := range sh.DataTypes {
				dt, err := ir.ParseDataType(name)
				if err != nil {
					return nil, fmt.Errorf("speckernels: %s: %w", sh.Shape, err)
				}
				if files[PTXName(sh.Shape, r, dt)] == nil {
					return nil, fmt.Errorf("speckernels: %s lacks %s", sh.Shape, PTXName(sh.Shape, r, dt))
				}
			}
		}
		out[sh.Shape] = s
	}
	return out, nil
}

func readFile(f *zip.File) ([]byte, error) {
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("speckernels: %s: %w", f.Name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("speckernels: %s: %w", f.Name, err)
	}
	return b, nil
}

// Lookup returns the embedded kernels of s, nil when the archive has none
// (or cannot be read: the generic executor then runs, as without them).
func Lookup(s Shape) *Set {
	m, err := open()
	if err != nil {
		return nil
	}
	return m[s.String()]
}

// TableSum is the SHA-256 of the op table rank's kernels were built from.
func (s *Set) TableSum(rank int) ([sha256.Size]byte, bool) {
	if rank < 0 || rank >= len(s.sums) {
		return [sha256.Size]byte{}, false
	}
	return s.sums[rank], true
}

// Kernel returns rank's PTX module for dt when table (the rank's op table,
// codegen/optable's encoding, as the runtime wrote it) is the one it was
// built from; nil, with no error, when there is no module for dt or the
// table differs (a generator or lowering that changed since: the generic
// executor runs it). Errors: the archive's.
func (s *Set) Kernel(rank int, dt ir.DataType, table []byte) ([]byte, error) {
	sum, ok := s.TableSum(rank)
	if !ok || sha256.Sum256(table) != sum {
		return nil, nil
	}
	f := s.files[PTXName(s.shape, rank, dt)]
	if f == nil {
		return nil, nil
	}
	return readFile(f)
}
