package abi

import (
	"encoding/binary"
	"math"
)

// ncclConfig_t (NCCL 2.17–2.25 layout), byte offsets on LP64:
//
//	size_t size @0, unsigned magic @8, unsigned version @12, int blocking @16,
//	int cgaClusterSize @20, int minCTAs @24, int maxCTAs @28,
//	const char* netName @32, int splitShare @40, (2.26+) int trafficClass @44.
//
// sizeof is 48 up to 2.26; 2.27 clients pass 72 bytes (commName,
// collnetEnable, CTAPolicy, shrinkShare, nvlsCTAs follow), 2.28 more. NCCL
// copies min(config->size, its own sizeof) and defaults what is missing;
// Theseus does the same with its 48-byte layout.
const (
	ConfigMagic      = 0xcafebeef
	ConfigHeaderSize = 16 // size, magic, version: always read
	ConfigReadSize   = 48 // the most Theseus reads
	UndefInt         = math.MinInt32
)

// Config is a decoded ncclConfig_t. Int fields hold UndefInt when the
// client left them at NCCL_CONFIG_UNDEF_INT or its struct is too short to
// have them.
type Config struct {
	Size    uint64 // the client's sizeof(ncclConfig_t), bytes
	Magic   uint32
	Version uint32 // the client's NCCL_VERSION_CODE
	// Blocking is 1 (default) or 0 (non-blocking communicator: calls may
	// return ncclInProgress).
	Blocking       int32
	CGAClusterSize int32
	MinCTAs        int32
	MaxCTAs        int32
	NetName        uint64 // address of a C string, 0 if unset
	SplitShare     int32
	// TrafficClass is read only from clients of NCCL >= 2.26 (22600), in
	// whose layout the bytes at 44 are a field rather than padding.
	TrafficClass int32
}

// DefaultConfig is what a NULL config means: blocking, everything else
// undefined.
func DefaultConfig() Config {
	return Config{Size: ConfigReadSize, Magic: ConfigMagic, Version: 22501, Blocking: 1, CGAClusterSize: UndefInt,
		MinCTAs: UndefInt, MaxCTAs: UndefInt, SplitShare: UndefInt, TrafficClass: UndefInt}
}

// ReadLen is how many bytes of a config whose size field is size the caller
// should copy: min(size, 48), but at least the 16-byte header.
func ReadLen(size uint64) int {
	if size < ConfigHeaderSize {
		return ConfigHeaderSize
	}
	if size > ConfigReadSize {
		return ConfigReadSize
	}
	return int(size)
}

// DecodeConfig decodes the first min(size, 48) bytes of a client's
// ncclConfig_t (b must hold at least the 16-byte header; a longer b is cut
// to the size field). Errors (InvalidArgument, as NCCL): a short b, a size
// smaller than the header, a wrong magic (the struct was not initialised
// with NCCL_CONFIG_INITIALIZER), blocking other than 0, 1 or undefined,
// negative CTA counts, or minCTAs > maxCTAs.
func DecodeConfig(b []byte) (Config, *Error) {
	c := DefaultConfig()
	if len(b) < ConfigHeaderSize {
		return c, errorf(InvalidArgument, "ncclConfig_t: %d bytes is shorter than its 16-byte header", len(b))
	}
	le := binary.LittleEndian
	c.Size, c.Magic, c.Version = le.Uint64(b[0:]), le.Uint32(b[8:]), le.Uint32(b[12:])
	if c.Magic != ConfigMagic {
		return c, errorf(InvalidArgument, "ncclConfig_t: bad magic %#x (want %#x): initialise it with NCCL_CONFIG_INITIALIZER", c.Magic, uint32(ConfigMagic))
	}
	if c.Size < ConfigHeaderSize {
		return c, errorf(InvalidArgument, "ncclConfig_t: size %d is smaller than its 16-byte header", c.Size)
	}
	if uint64(len(b)) > c.Size {
		b = b[:c.Size]
	}
	if len(b) > ConfigReadSize {
		b = b[:ConfigReadSize]
	}
	i32 := func(off int, dst *int32) {
		if len(b) >= off+4 {
			*dst = int32(le.Uint32(b[off:]))
		}
	}
	i32(16, &c.Blocking)
	i32(20, &c.CGAClusterSize)
	i32(24, &c.MinCTAs)
	i32(28, &c.MaxCTAs)
	if len(b) >= 40 {
		c.NetName = le.Uint64(b[32:])
	}
	i32(40, &c.SplitShare)
	if c.Version >= 22600 {
		i32(44, &c.TrafficClass)
	}
	if c.Blocking == UndefInt {
		c.Blocking = 1
	}
	if c.Blocking != 0 && c.Blocking != 1 {
		return c, errorf(InvalidArgument, "ncclConfig_t: blocking must be 0 or 1 (got %d)", c.Blocking)
	}
	for _, f := range []struct {
		name string
		v    int32
	}{{"cgaClusterSize", c.CGAClusterSize}, {"minCTAs", c.MinCTAs}, {"maxCTAs", c.MaxCTAs}} {
		if f.v != UndefInt && f.v < 0 {
			return c, errorf(InvalidArgument, "ncclConfig_t: %s must be >= 0 (got %d)", f.name, f.v)
		}
	}
	if c.MinCTAs != UndefInt && c.MaxCTAs != UndefInt && c.MinCTAs > c.MaxCTAs {
		return c, errorf(InvalidArgument, "ncclConfig_t: minCTAs %d > maxCTAs %d", c.MinCTAs, c.MaxCTAs)
	}
	return c, nil
}
