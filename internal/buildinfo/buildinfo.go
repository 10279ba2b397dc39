// Package buildinfo holds what the build stamps into the binary: the keel release.
package buildinfo

import "runtime/debug"

// Release is set at link time (-X github.com/keel-kv/keel/internal/buildinfo.Release=...).
// Builds without it report the module version or "dev".
var Release = ""

// Version returns the release this binary reports to other nodes and to operators.
func Version() string {
	if Release != "" {
		return Release
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
