// Package releasecheck holds the tests of what `make release` ships: the archive's layout, and
// that its binaries run on a host without HiGHS, without the checkout and without pkg-config.
// It has no code of its own.
package releasecheck
