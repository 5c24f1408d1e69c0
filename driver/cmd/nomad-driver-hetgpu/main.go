// Command nomad-driver-hetgpu is the Nomad task driver "hetgpu". Nomad starts it as a plugin;
// the driver re-executes it as "nomad-driver-hetgpu shim SPEC" to supervise each task.
package main

import (
	"os"

	"github.com/hetgpu/hetgpu/driver"
	"github.com/hetgpu/hetgpu/driver/shim"
	"github.com/hetgpu/hetgpu/internal/version"
	"github.com/hetgpu/hetgpu/plugin"
)

func main() {
	// Run by hand with --version it says which release it is instead of serving.
	if version.AnswerVersionFlag("nomad-driver-hetgpu", os.Args[1:]) {
		return
	}
	// Shim mode first: it must not touch go-plugin or write a handshake.
	if len(os.Args) > 1 && os.Args[1] == shim.Command {
		os.Exit(shim.Main(os.Args[2:]))
	}
	logger := plugin.NewLogger("nomad-driver-hetgpu")
	d := driver.New(logger, driver.Options{FakeNVML: fakeNVML})
	plugin.Serve(plugin.ServeConfig{Base: d.BaseServer(), Driver: d, Logger: logger})
}
