// Package treecheck holds tests of the repository itself: no executable binaries and no large
// files are tracked, and `make deps` writes nothing outside the checkout. It has no code of its
// own.
package treecheck
