package app

import (
	"fmt"

	"github.com/hetgpu/hetgpu/sidecar/stages/queue"
)

// finishQueues checks the queue blocks and the queues block into QueueConfig.
func (c *Config) finishQueues() error {
	where := ""
	if c.File != "" {
		where = c.File + ": "
	}
	qc := queue.Config{Queues: c.Queues}
	if c.QueueSet != nil && c.QueueSet.HalfLife != "" {
		d, err := duration(c.QueueSet.HalfLife, 0)
		if err != nil || d <= 0 {
			return fmt.Errorf("%sconfig queues.half_life = %q: expected a positive duration, e.g. \"168h\"", where, c.QueueSet.HalfLife)
		}
		qc.HalfLife = d
	}
	qc.Defaults()
	if _, err := qc.Validate(0); err != nil {
		return fmt.Errorf("%sconfig %w", where, err)
	}
	c.QueueConfig = qc
	return nil
}
