// Package discoverytest builds snapshot documents for tests: a control plane in
// the middle of a rolling upgrade, described by which server serves what.
//
// Only this module's tests import it, yet it is not internal: Go lets a
// package under discovery/internal/ be imported only from discovery/, and its
// users are the tests of discovery/, plugin/, host/ and bench/, whose only
// common ancestor is the module root, which keeps no internal/ directory.
// Nothing shipped links it (make deadcode counts only what the binaries and
// the module reach).
package discoverytest
