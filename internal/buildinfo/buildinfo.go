// Package buildinfo holds what identifies a keel build: the release this source tree
// is (Semver) and what the build stamped into the binary (Release).
package buildinfo

import "runtime/debug"

// Semver is the release this source tree is, MAJOR.MINOR.PATCH. It changes in the
// commit that cuts a release, which is tagged v<Semver>. docs/compatibility.md says
// which releases may run side by side.
const Semver = "0.9.0"

// Release is set at link time (-X github.com/keel-kv/keel/internal/buildinfo.Release=...)
// to the git commit the binary was built from (`git describe --always --dirty`).
var Release = ""

// Version returns the release this binary reports to other nodes and to operators:
// v<Semver>, plus +<commit> when the build stamped one that is not the tag itself.
func Version() string {
	v := "v" + Semver
	switch {
	case Release != "" && Release != v:
		return v + "+" + Release
	case Release != "":
		return v
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 7 {
				return v + "+" + s.Value[:7]
			}
		}
	}
	return v
}
