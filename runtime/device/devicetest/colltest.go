// Package devicetest holds test helpers for backends and for the runtime
// packages above them: reference data for every collective (Case, from
// runtime/interp/reference) and a null backend that measures the
// executor's host cost without running anything. Only tests import it
// (internal/layering checks that).
package devicetest

import "github.com/theseus-ccl/theseus/runtime/interp/reference"

// Case is one collective request on every rank of a communicator with its
// reference data (reference.Case: the product's theseus-bench uses it
// too).
type Case = reference.Case

// Wrong counts the elements of size es that differ between got and want, bit
// for bit (every element when the lengths differ).
func Wrong(got, want []byte, es int) int64 { return reference.Wrong(got, want, es) }
