package buildinfo

import (
	"regexp"
	"testing"
)

func TestVersionIsSemver(t *testing.T) {
	defer func(r string) { Release = r }(Release)
	semver := regexp.MustCompile(`^v\d+\.\d+\.\d+(\+[0-9A-Za-z.-]+)?$`)
	for _, tc := range []struct{ release, want string }{
		{"", ""},
		{"v" + Semver, "v" + Semver},
		{"85d08eb-dirty", "v" + Semver + "+85d08eb-dirty"},
	} {
		Release = tc.release
		got := Version()
		if !semver.MatchString(got) || (tc.want != "" && got != tc.want) {
			t.Errorf("Release %q: Version = %q, want %q (semver)", tc.release, got, tc.want)
		}
	}
}
