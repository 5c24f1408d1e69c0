package fake

import (
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// eventSet is an NVML event set backed by a channel; Wait blocks up to its timeout like NVML's.
type eventSet struct {
	mock.EventSet
	ch   chan nvml.EventData
	done chan struct{}
}

func newEventSet() *eventSet {
	s := &eventSet{ch: make(chan nvml.EventData, 64), done: make(chan struct{})}
	s.WaitFunc = func(timeoutMs uint32) (nvml.EventData, nvml.Return) {
		t := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
		defer t.Stop()
		select {
		case e := <-s.ch:
			return e, nvml.SUCCESS
		case <-s.done:
			return nvml.EventData{}, nvml.ERROR_UNINITIALIZED
		case <-t.C:
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
	}
	freed := false
	s.FreeFunc = func() nvml.Return {
		if !freed {
			freed = true
			close(s.done)
		}
		return nvml.SUCCESS
	}
	return s
}

// push delivers e unless the set is freed or full (NVML drops events when nobody waits, too).
func (s *eventSet) push(e nvml.EventData) {
	select {
	case <-s.done:
	case s.ch <- e:
	default:
	}
}
