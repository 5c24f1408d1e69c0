package releasecheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hetgpu/hetgpu/internal/doccheck"
	"github.com/hetgpu/hetgpu/internal/version"
)

// TestChangelogAndGuideNameThisVersion: CHANGELOG.md keeps an [Unreleased] section above a
// dated section for internal/version's Version, and docs/install.md walks through this
// version's archive, so bumping the version means writing both.
func TestChangelogAndGuideNameThisVersion(t *testing.T) {
	root, err := doccheck.Root(".")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	sections := regexp.MustCompile(`(?m)^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$`).FindAllStringSubmatch(string(cl), -1)
	if len(sections) < 2 || sections[0][1] != "Unreleased" {
		t.Fatalf("CHANGELOG.md sections %v: want ## [Unreleased] first, then the releases", sections)
	}
	if sections[1][1] != version.Version || sections[1][2] == "" {
		t.Errorf("CHANGELOG.md's newest release is %q (date %q); internal/version says %s: add a dated ## [%s] - YYYY-MM-DD section",
			sections[1][1], sections[1][2], version.Version, version.Version)
	}
	guide, err := os.ReadFile(filepath.Join(root, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "hetgpu_" + version.Version + "_linux_amd64.tar.gz"; !strings.Contains(string(guide), want) {
		t.Errorf("docs/install.md does not name this version's archive %s", want)
	}
}
