package server

import (
	"fmt"
	"html/template"
	"strings"

	"github.com/hetgpu/hetgpu/sidecar/runtime/service"
)

type explainPage struct {
	Namespace, JobID string
	NotFound         bool
	// Signed is the signed link's "&exp=…&sig=…" the page was opened with, so its JSON link
	// opens too.
	Signed template.URL
	Ex     *service.Explanation
}

var explainTmpl = template.Must(template.New("explain").Funcs(template.FuncMap{
	"num": func(v float64) string {
		if v == 0 {
			return "–"
		}
		return fmt.Sprintf("%.4g", v)
	},
	"upper": strings.ToUpper,
	"join":  strings.Join,
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>hetgpu: {{.Namespace}}/{{.JobID}}</title>
<style>
body{font-family:system-ui,sans-serif;max-width:70em;margin:2em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}tr.chosen{background:#e8f6e8;font-weight:bold}
.status{display:inline-block;padding:.1em .5em;border-radius:.3em;background:#eef;font-size:90%}
.err{color:#a00}code{background:#f6f6f6;padding:0 .2em}
</style></head><body>
<h1>{{.Namespace}} / {{.JobID}}</h1>
{{if .NotFound}}<p>hetgpu has no record of this job: it is not held for hetgpu, or no round has seen it yet.</p>
{{else}}{{range .Ex.Groups}}
<h2>group <code>{{.Group}}</code> <span class="status">{{.Status}}</span></h2>
<p>{{.Summary}}</p>
{{if .Error}}<p class="err">{{.Error}}</p>{{end}}
{{with .Decision}}{{with .Decision}}
<h3>Decision</h3>
<table><tr><th class="l">node</th><th class="l">device group</th><th class="l">GPUs</th></tr>
{{range .Assign}}<tr><td class="l"><code>{{.NodeID}}</code></td><td class="l">{{.DeviceGroup}}</td><td class="l">{{join .InstanceIDs ", "}}</td></tr>{{end}}
</table>
<p>predicted throughput {{num .PredThroughput}} steps/s, power {{num .PredPowerW}} W, score {{num .Score}}</p>
{{end}}{{if .Shadow}}<p>Nomad placed it on {{join .Shadow.NomadNodeIDs ", "}} ({{upper .Shadow.NomadGPUType}}); same GPU type: {{.Shadow.SameGPUType}}, same nodes: {{.Shadow.SameNodes}}</p>{{end}}
{{if .Features}}<h3>Ranking features (rank {{.Rank}} of {{.QueueLen}})</h3>
<table><tr><th class="l">feature</th><th>value</th></tr>{{range $k, $v := .Features}}<tr><td class="l">{{$k}}</td><td>{{printf "%.4g" $v}}</td></tr>{{end}}</table>{{end}}
{{end}}
{{with .Queue}}{{if .Features}}<h3>Ranking features (rank {{.Rank}})</h3>
<table><tr><th class="l">feature</th><th>value</th></tr>{{range $k, $v := .Features}}<tr><td class="l">{{$k}}</td><td>{{printf "%.4g" $v}}</td></tr>{{end}}</table>{{end}}{{end}}
{{if .Estimates}}<h3>Predicted per GPU type</h3>
<table><tr><th class="l">GPU type</th><th>GPUs</th><th>throughput (steps/s)</th><th>power (W)</th><th>energy (J/step)</th><th>runtime (s)</th><th>energy (kJ)</th><th>meets T_min</th><th>free GPUs</th><th>fits now</th><th class="l">source</th></tr>
{{range .Estimates}}<tr{{if .Chosen}} class="chosen"{{end}}><td class="l">{{upper .GPUType}}{{if .Chosen}} (chosen){{end}}</td><td>{{.GPUs}}</td><td>{{num .Throughput}}</td><td>{{num .PowerW}}</td><td>{{num .EnergyPerStepJ}}</td><td>{{num .RuntimeS}}</td><td>{{if .EnergyJ}}{{printf "%.4g" .EnergyJ}}{{else}}–{{end}}</td><td>{{.MeetsTMin}}</td><td>{{.FreeGPUs}}</td><td>{{.FitsNow}}</td><td class="l">{{.Source}}</td></tr>{{end}}
</table>{{end}}
{{if .Alternatives}}<h3>Alternatives considered</h3><ul>
{{range .Alternatives}}<li><b>{{upper .GPUType}}</b>{{if .NodeName}} on {{.NodeName}}{{else}}{{if .NodeIDs}} on {{join .NodeIDs ", "}}{{end}}{{end}}: {{.Why}}</li>{{end}}
</ul>{{end}}
{{end}}{{end}}
<p><a href="/v1/jobs/{{.Namespace}}/{{.JobID}}/explain?format=json{{.Signed}}">JSON</a> · <a href="/v1/queue">queue</a> · <a href="/v1/decisions">decisions</a> · <a href="/ui/fleet">dashboard</a></p>
</body></html>
`))
