// Package plugin serves hetgpu's Nomad plugins (the device plugin and the task driver) over
// Nomad's go-plugin/gRPC wire protocol, without importing Nomad itself (its licence forbids it).
//
// The generated protocol lives in the proto/ subpackages (base, device, drivers, hclspec,
// structs) with Nomad's exact proto packages, services and field numbers. This package adds what
// every plugin main needs around them:
//
//	func main() {
//		logger := plugin.NewLogger("nomad-device-hetgpu") // JSON on the real stderr, first thing
//		impl := mydevice.New(logger)                     // implements base.BasePluginServer and
//		plugin.Serve(plugin.ServeConfig{                 // device.DevicePluginServer
//			Base: impl, Device: impl, Logger: logger,
//		})
//	}
//
// Serve performs Nomad's handshake (protocol version 2 and Nomad's magic cookie) and registers
// the "base" and "device" (or "driver") entries on one gRPC server. Nothing may ever be written
// to stdout: go-plugin uses it for the handshake line.
//
// Inside the BasePlugin methods, Info builds PluginInfoResponse with a go-version-parseable
// version, the spec builders (Object, Attr, Default, Literal, Block, ...) build ConfigSchema's
// answer, and DecodeConfig turns SetConfig's go-cty msgpack bytes into a Go struct pre-filled
// with defaults. Device plugins build group attributes with Attributes, which enforces Nomad's
// validation (one value, known units), and check whole groups with ValidateGroup before sending:
// a single invalid group makes Nomad kill the plugin. Task drivers report StartTask failures with
// RecoverableError.
//
// For tests, Launch starts a built plugin binary exactly as Nomad does, and EncodeHCLConfig parses
// an agent-style HCL config block with a plugin's schema and encodes it as Nomad would.
package plugin
