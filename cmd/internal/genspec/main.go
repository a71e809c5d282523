// Command genspec builds runtime/speckernels' archive: for each of
// speckernels.Shapes, every rank's op table as the runtime generates it
// (schedfile.GeneratedTables), compiled into a specialised kernel per
// datatype of speckernels.DataTypes with clang-14 (codegen/specialize, the
// flags and sources of cuda/kernel, as `theseusc compile --specialize`),
// checked (specialize.Check), into a zip file with the tables' hashes.
//
//	go run ./cmd/internal/genspec -o runtime/speckernels/kernels.zip
//	go run ./cmd/internal/genspec -check runtime/speckernels/kernels.zip
//
// -check builds the archive in memory and compares every entry with the
// file's, exiting 1 with the entries that differ (a kernel source or a
// generator changed since the file was written: run go generate
// ./runtime/speckernels). .ci/run runs it.
package main

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/theseus-ccl/theseus/codegen/specialize"
	"github.com/theseus-ccl/theseus/cuda/kernel"
	"github.com/theseus-ccl/theseus/runtime/selector/schedfile"
	"github.com/theseus-ccl/theseus/runtime/speckernels"
)

func main() {
	out := flag.String("o", "", "write the archive to this file")
	check := flag.String("check", "", "compare the archive built with this file's; exit 1 when they differ")
	clang := flag.String("clang", "clang-14", "the compiler")
	flag.Parse()
	if (*out == "") == (*check == "") {
		fmt.Fprintln(os.Stderr, "genspec: give -o FILE or -check FILE")
		os.Exit(2)
	}
	start := time.Now()
	data, err := build(*clang)
	if err != nil {
		fmt.Fprintln(os.Stderr, "genspec:", err)
		os.Exit(1)
	}
	if *out != "" {
		if err := os.WriteFile(*out, data, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "genspec:", err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "genspec: %s, %d bytes, in %v\n", *out, len(data), time.Since(start).Round(time.Millisecond))
		return
	}
	old, err := os.ReadFile(*check)
	if err != nil {
		fmt.Fprintln(os.Stderr, "genspec:", err)
		os.Exit(1)
	}
	if diff := compare(old, data); len(diff) > 0 {
		fmt.Fprintf(os.Stderr, "genspec: %s is not current (go generate ./runtime/speckernels):\n", *check)
		for _, d := range diff {
			fmt.Fprintln(os.Stderr, "  "+d)
		}
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "genspec: %s is current (%v)\n", *check, time.Since(start).Round(time.Millisecond))
}

// build returns the archive: index.json, then each shape's modules in
// rank and datatype order, with no timestamps (the same bytes from the
// same sources).
func build(clang string) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	all, err := tables()
	if err != nil {
		return nil, err
	}
	var idx speckernels.Index
	if idx.Inputs, err = inputs(all); err != nil {
		return nil, err
	}
	mods := map[string][]byte{}
	for i, sh := range speckernels.Shapes {
		tabs := all[i]
		is := speckernels.IndexShape{Shape: sh.String()}
		for _, dt := range speckernels.DataTypes {
			is.DataTypes = append(is.DataTypes, dt.String())
		}
		for r, tab := range tabs {
			sum := sha256.Sum256(tab)
			is.Tables = append(is.Tables, hex.EncodeToString(sum[:]))
			src, err := specialize.Source(tab, sh.String(), r)
			if err != nil {
				return nil, fmt.Errorf("%v rank %d: %w", sh, r, err)
			}
			ptx, err := specialize.Compile(context.Background(), src, specialize.Options{Clang: clang, Kernel: kernel.Sources,
				Flags: kernel.ClangFlags(), DataTypes: speckernels.DataTypes})
			if err != nil {
				return nil, fmt.Errorf("%v rank %d: %w", sh, r, err)
			}
			for _, dt := range speckernels.DataTypes {
				if err := specialize.Check(ptx[dt]); err != nil {
					return nil, fmt.Errorf("%v rank %d %v: %w", sh, r, dt, err)
				}
				mods[speckernels.PTXName(sh.String(), r, dt)] = ptx[dt]
			}
		}
		idx.Shapes = append(idx.Shapes, is)
	}
	ij, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return nil, err
	}
	write := func(name string, data []byte) error {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate})
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	}
	if err := write("index.json", append(ij, '\n')); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(mods))
	for n := range mods {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := write(n, mods[n]); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tables are every rank's op table of each of speckernels.Shapes, as the
// runtime generates them.
func tables() ([][][]byte, error) {
	all := make([][][]byte, len(speckernels.Shapes))
	for i, sh := range speckernels.Shapes {
		tabs, err := schedfile.GeneratedTables(sh.Algo, sh.Coll, sh.Proto, sh.Channels, sh.NRanks, sh.NLocalRanks)
		if err != nil {
			return nil, fmt.Errorf("%v: %w", sh, err)
		}
		all[i] = tabs
	}
	return all, nil
}

// inputs is the digest of what the modules are compiled from besides the
// tables (speckernels.Index.Inputs): every file of cuda/kernel's Sources
// (by path), its clang flags, the datatypes, and each rank's translation
// unit of every shape (specialize.Source of its table, all: tables'). No
// clang is needed to compute it.
func inputs(all [][][]byte) (string, error) {
	h := sha256.New()
	err := fs.WalkDir(kernel.Sources, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(kernel.Sources, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "file %s %d\n", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", err
	}
	fmt.Fprintf(h, "flags %q\ndtypes %v\n", kernel.ClangFlags(), speckernels.DataTypes)
	for i, sh := range speckernels.Shapes {
		for r, tab := range all[i] {
			src, err := specialize.Source(tab, sh.String(), r)
			if err != nil {
				return "", fmt.Errorf("%v rank %d: %w", sh, r, err)
			}
			fmt.Fprintf(h, "unit %v %d %d\n", sh, r, len(src))
			h.Write(src)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// compare lists the entries of archives a (the file) and b (built) that
// differ, are missing or are extra.
func compare(a, b []byte) []string {
	ea, err := entries(a)
	if err != nil {
		return []string{err.Error()}
	}
	eb, err := entries(b)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for n, x := range eb {
		y, ok := ea[n]
		switch {
		case !ok:
			out = append(out, n+": missing from the file")
		case !bytes.Equal(x, y):
			out = append(out, n+": differs")
		}
	}
	for n := range ea {
		if _, ok := eb[n]; !ok {
			out = append(out, n+": in the file, not built")
		}
	}
	slices.Sort(out)
	return out
}

func entries(data []byte) (map[string][]byte, error) {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, err
	}
	m := map[string][]byte{}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		_, err = b.ReadFrom(rc)
		rc.Close()
		if err != nil {
			return nil, err
		}
		m[f.Name] = b.Bytes()
	}
	return m, nil
}
