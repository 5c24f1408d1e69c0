// Command nomad-device-hetgpu is hetgpu's Nomad device plugin. Nomad starts it from plugin_dir;
// run by hand it prints go-plugin's "This binary is a plugin" notice and exits.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/hetgpu/hetgpu/device"
	"github.com/hetgpu/hetgpu/internal/version"
	"github.com/hetgpu/hetgpu/plugin"
)

func main() {
	// Run by hand with --version it says which release it is instead of serving.
	if version.AnswerVersionFlag("nomad-device-hetgpu", os.Args[1:]) {
		return
	}
	// The logger comes first: go-plugin replaces os.Stderr after the handshake.
	logger := plugin.NewLogger(device.PluginName)
	// Nomad kills device plugins; SIGTERM from a manual stop also ends the monitor and NVML cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	p := device.New(ctx, logger)
	plugin.Serve(plugin.ServeConfig{Base: p, Device: p, Logger: logger})
	os.Exit(0)
}
