package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/codegen/specialize"
	"github.com/theseus-ccl/theseus/cuda/kernel"
	"github.com/theseus-ccl/theseus/ir"
)

// specializeBundle adds every rank's specialised kernel for each of
// dtypes to b (compile --specialize; docs/specialize.md), checked
// (specialize.Check) before they go in.
func specializeBundle(b *bundle.Bundle, dtypes []string, clang string, s cli.Streams) error {
	var dts []ir.DataType
	for _, name := range dtypes {
		dt, err := ir.ParseDataType(strings.TrimSpace(name))
		if err != nil {
			return cli.Usagef("--specialize-dtypes: %v", err)
		}
		dts = append(dts, dt)
	}
	if len(dts) == 0 {
		return cli.Usagef("--specialize-dtypes: no datatype")
	}
	if _, err := exec.LookPath(clang); err != nil {
		return cli.Usagef("--specialize needs %s (apt-get install clang-14): %v", clang, err)
	}
	start := time.Now()
	var ks []bundle.Kernel
	for r := range b.Meta.NRanks {
		tab, err := b.TableBytes(r)
		if err != nil {
			return cli.Internal(err)
		}
		src, err := specialize.Source(tab, b.Meta.Name, r)
		if errors.Is(err, specialize.ErrTooLarge) {
			fmt.Fprintf(s.Err, "compile: --specialize: %v; no bundle written\n", err)
			return cli.Findings()
		}
		if err != nil {
			return cli.Internal(err)
		}
		mods, err := specialize.Compile(context.Background(), src, specialize.Options{Clang: clang, Kernel: kernel.Sources,
			Flags: kernel.ClangFlags(), DataTypes: dts})
		if err != nil {
			return cli.Internal(err)
		}
		for _, dt := range dts {
			if err := specialize.Check(mods[dt]); err != nil {
				return cli.Internal(fmt.Errorf("rank %d %v: %w", r, dt, err))
			}
			ks = append(ks, bundle.Kernel{Rank: r, DataType: dt, PTX: mods[dt]})
		}
	}
	bundle.SortKernels(ks)
	b.Kernels = ks
	fmt.Fprintf(s.Err, "compile: specialised %d ranks x %d datatypes in %v\n", b.Meta.NRanks, len(dts), time.Since(start).Round(time.Millisecond))
	return b.Validate()
}
