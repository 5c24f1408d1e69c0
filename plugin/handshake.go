package plugin

import (
	goplugin "github.com/hashicorp/go-plugin"
)

// Nomad's plugin-set keys and API version (facts doc §2.1).
const (
	KeyBase   = "base"
	KeyDevice = "device"
	KeyDriver = "driver"

	// APIVersion is the only device and driver API version any Nomad agent supports.
	APIVersion = "v0.1.0"

	// ProtocolVersion is go-plugin's app protocol version for Nomad 0.9+ gRPC plugins.
	ProtocolVersion = 2
	// MagicCookieKey and MagicCookieValue let the binary tell it was started by Nomad.
	MagicCookieKey   = "NOMAD_PLUGIN_MAGIC_COOKIE"
	MagicCookieValue = "e4327c2e01eabfd75a8a67adb114fb34a757d57eee7728d857a8cec6e91a7255"
)

// Handshake returns Nomad's go-plugin handshake. It is a function, not a variable, so no caller can
// change it for everyone.
func Handshake() goplugin.HandshakeConfig {
	return goplugin.HandshakeConfig{
		ProtocolVersion:  ProtocolVersion,
		MagicCookieKey:   MagicCookieKey,
		MagicCookieValue: MagicCookieValue,
	}
}
