// Package schedjson reads and writes Theseus schedule JSON v1, the native,
// direct encoding of an ir.Program (docs/schedule-format.md is the spec;
// docs/design/ir.md gives the semantics of every field).
//
//   - Parse decodes a file into an ir.Program, with file:line:col
//     diagnostics carrying stable codes from diag (TS0001..TS0012).
//     It checks the format (syntax, field names, types, value domains, ids,
//     size limits) but not the schedule: ranges against buffers, channel
//     pairing, synchronisation, races and the collective's postcondition are
//     the verifier's (compiler/verify).
//   - Format writes the canonical form: fixed key order, two-space indent,
//     one channel and one op per line, optional fields left out when they
//     hold their default. Parse(Format(p)) equals p up to positions, and
//     Format(Parse(x)) is a fixed point. It is what `theseusc fmt` and
//     `theseusc import` print.
//
// Parse reads the schedule with encoding/json: a validating pre-pass for
// exact syntax-error offsets, then a Decoder.Token walk that keeps the byte
// offset of every value and reports every problem at its position.
// Positions are 1-based lines and 1-based byte columns.
package schedjson
