package rank

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/hetgpu/hetgpu/internal/nn"
)

// CheckpointFormat and CheckpointVersion identify policy files. The version changes when the
// file layout changes; the feature schema inside has its own version.
const (
	CheckpointFormat  = "hetgpu-rank-policy"
	CheckpointVersion = 1
)

// Checkpoint is a policy file: the feature schema and normalisation the policy was trained
// with, both networks, and (for resuming) the training state.
type Checkpoint struct {
	Format  string      `json:"format"`
	Version int         `json:"version"`
	Schema  Schema      `json:"schema"`
	Norm    *Normalizer `json:"norm"`
	GNorm   *Normalizer `json:"global_norm"`
	Actor   NetFile     `json:"actor"`
	Critic  NetFile     `json:"critic"`
	// Residual: the actor corrects the fallback heuristic's score (Policy.Residual).
	Residual bool `json:"residual,omitempty"`
	// Training is absent in a policy stripped for shipping.
	Training *TrainState `json:"training,omitempty"`
	// Meta records provenance (cluster, trace, score, command).
	Meta map[string]string `json:"meta,omitempty"`
}

// Meta keys online fine-tuning writes into an adopted checkpoint: the evidence it was adopted on.
const (
	MetaTunedReward       = "tuned_reward"
	MetaTunedRewardBefore = "tuned_reward_before"
	MetaTunedEpisodes     = "tuned_episodes"
	// MetaTunedBeatsBaseline is "true" when the step was also required to beat the
	// environment's baseline (the fine-tuner's BeatBaseline) and did.
	MetaTunedBeatsBaseline = "tuned_beats_baseline"
)

// NetFile is one network's layout and parameters.
type NetFile struct {
	Sizes  []int     `json:"sizes"`
	Params []float64 `json:"params"`
}

// TrainState is what resuming training (sidecar/learning/ppo) needs besides the policy. The
// runtime only carries it: the bundled checkpoint keeps it so online fine-tuning continues.
type TrainState struct {
	Config TrainConfig  `json:"config"`
	Epoch  int          `json:"epoch"`
	AdamPi *nn.Adam     `json:"adam_policy"`
	AdamV  *nn.Adam     `json:"adam_value"`
	Curve  []EpochStats `json:"curve"`
}

// PolicyCheckpoint wraps a policy without training state.
func PolicyCheckpoint(p *Policy) *Checkpoint {
	return &Checkpoint{
		Format: CheckpointFormat, Version: CheckpointVersion, Schema: p.Schema,
		Norm: p.Norm.Clone(), GNorm: p.GNorm.Clone(),
		// Copies: a checkpoint kept while training goes on must not change with it.
		Actor:    NetFile{Sizes: slices.Clone(p.Actor.Sizes), Params: slices.Clone(p.Actor.Params)},
		Critic:   NetFile{Sizes: slices.Clone(p.Critic.Sizes), Params: slices.Clone(p.Critic.Params)},
		Residual: p.Residual,
	}
}

// Policy rebuilds the policy of a validated checkpoint.
func (c *Checkpoint) Policy() (*Policy, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	a, err := nn.NewMLP(c.Actor.Sizes...)
	if err != nil {
		return nil, fmt.Errorf("actor: %w", err)
	}
	copy(a.Params, c.Actor.Params)
	cr, err := nn.NewMLP(c.Critic.Sizes...)
	if err != nil {
		return nil, fmt.Errorf("critic: %w", err)
	}
	copy(cr.Params, c.Critic.Params)
	return &Policy{Schema: c.Schema, Norm: c.Norm.Clone(), GNorm: c.GNorm.Clone(), Actor: a, Critic: cr, Residual: c.Residual}, nil
}

// Validate checks a checkpoint read from a file, naming the offending field.
func (c *Checkpoint) Validate() error {
	if c.Format != CheckpointFormat {
		return fmt.Errorf("format: %q, expected %q", c.Format, CheckpointFormat)
	}
	if c.Version != CheckpointVersion {
		return fmt.Errorf("version: %d, this build reads version %d", c.Version, CheckpointVersion)
	}
	if err := c.Schema.Validate(); err != nil {
		return err
	}
	f, g := len(c.Schema.Features), len(c.Schema.Globals)
	if c.Norm == nil || c.GNorm == nil {
		return errors.New("norm and global_norm: both are required")
	}
	if err := c.Norm.validate(f, "norm"); err != nil {
		return err
	}
	if err := c.GNorm.validate(g, "global_norm"); err != nil {
		return err
	}
	if err := c.Actor.validate("actor", f); err != nil {
		return err
	}
	return c.Critic.validate("critic", 2*f+g)
}

func (n NetFile) validate(field string, in int) error {
	if len(n.Sizes) < 2 || n.Sizes[0] != in || n.Sizes[len(n.Sizes)-1] != 1 {
		return fmt.Errorf("%s.sizes: %v, expected [%d, hidden..., 1]", field, n.Sizes, in)
	}
	want := 0
	for i := 1; i < len(n.Sizes); i++ {
		if n.Sizes[i] <= 0 {
			return fmt.Errorf("%s.sizes[%d]: %d, expected > 0", field, i, n.Sizes[i])
		}
		want += n.Sizes[i-1]*n.Sizes[i] + n.Sizes[i]
	}
	if len(n.Params) != want {
		return fmt.Errorf("%s.params: %d values, expected %d for sizes %v", field, len(n.Params), want, n.Sizes)
	}
	for i, v := range n.Params {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%s.params[%d]: %v, expected a finite number", field, i, v)
		}
	}
	return nil
}

// Write encodes the checkpoint as JSON.
func (c *Checkpoint) Write(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(c)
}

// Save writes the checkpoint to path atomically (temporary file, then rename).
func (c *Checkpoint) Save(path string) error {
	var b bytes.Buffer
	if err := c.Write(&b); err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("save checkpoint: %w", err)
		}
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("save checkpoint: %w", err)
	}
	return nil
}

// ReadCheckpoint decodes and validates a checkpoint.
func ReadCheckpoint(r io.Reader) (*Checkpoint, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var c Checkpoint
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("decode policy checkpoint: %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("policy checkpoint: %w", err)
	}
	return &c, nil
}

// LoadCheckpoint reads a checkpoint file.
func LoadCheckpoint(path string) (*Checkpoint, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open policy checkpoint: %w", err)
	}
	defer f.Close()
	c, err := ReadCheckpoint(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// bundled holds the pretrained default policy produced by `make train`.
//
//go:embed policy
var bundled embed.FS

// DefaultPolicyPath is where the bundled policy lives in the source tree.
const DefaultPolicyPath = "policy/default.json"

// DefaultPolicy returns the bundled pretrained policy, or nil (and no error) when this build
// has none, in which case the ranker falls back to Heuristic.
func DefaultPolicy() (*Policy, error) {
	c, err := DefaultCheckpoint()
	if c == nil || err != nil {
		return nil, err
	}
	return c.Policy()
}

// DefaultCheckpoint returns the bundled checkpoint (policy and training state, so online
// fine-tuning can continue from it), or nil and no error when this build has none.
func DefaultCheckpoint() (*Checkpoint, error) {
	b, err := bundled.ReadFile(DefaultPolicyPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bundled policy: %w", err)
	}
	c, err := ReadCheckpoint(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("bundled policy %s: %w", DefaultPolicyPath, err)
	}
	return c, nil
}

// NewDefault returns a ranker with the bundled policy, or the heuristic when there is none.
func NewDefault(opts ...Option) (*Ranker, error) {
	p, err := DefaultPolicy()
	if err != nil {
		return nil, err
	}
	return New(p, opts...)
}
