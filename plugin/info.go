package plugin

import (
	"strings"

	goversion "github.com/hashicorp/go-version"

	"github.com/hetgpu/hetgpu/plugin/proto/base"
)

// fallbackVersion is sent when the build's version string is not a version at all (e.g. a bare
// commit hash from `git describe --always`).
const fallbackVersion = "0.1.0"

// Info builds the PluginInfo answer Nomad accepts: the given type, API ["v0.1.0"] and a
// plugin_version that go-version parses (Nomad skips a plugin whose version does not parse).
func Info(typ base.PluginType, name, version string) *base.PluginInfoResponse {
	return &base.PluginInfoResponse{
		Type:              typ,
		PluginApiVersions: []string{APIVersion},
		PluginVersion:     SanitizeVersion(version),
		Name:              name,
	}
}

// SanitizeVersion returns v without a leading "v" if go-version parses it; otherwise "0.1.0" with
// v's alphanumerics as build metadata ("abc1234" -> "0.1.0+abc1234"), or "0.1.0" if even that fails.
func SanitizeVersion(v string) string {
	v = strings.TrimSpace(v)
	if _, err := goversion.NewVersion(v); err == nil && v != "" {
		return strings.TrimPrefix(v, "v")
	}
	var meta strings.Builder
	for _, r := range v {
		switch {
		case r >= '0' && r <= '9', r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
			meta.WriteRune(r)
		case meta.Len() > 0 && !strings.HasSuffix(meta.String(), "."):
			meta.WriteByte('.')
		}
	}
	m := strings.TrimSuffix(meta.String(), ".")
	if m == "" {
		return fallbackVersion
	}
	out := fallbackVersion + "+" + m
	if _, err := goversion.NewVersion(out); err != nil {
		return fallbackVersion
	}
	return out
}
