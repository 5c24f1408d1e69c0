// Package archtest holds the test that enforces what may import what in this module (see
// docs/architecture.md); it has no code of its own.
package archtest
