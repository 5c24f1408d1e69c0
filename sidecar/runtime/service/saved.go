package service

import "encoding/json"

// saveMeta keeps v as JSON under the store's meta key key (a learned window a restart or a new
// leader restores with restoreMeta); a failure is logged as a warning, failed its message.
func (s *Service) saveMeta(key string, v any, failed string) {
	b, err := json.Marshal(v)
	if err == nil {
		err = s.store.PutMeta(key, string(b))
	}
	if err != nil {
		s.log.Warn(failed, "error", err)
	}
}

// restoreMeta hands what saveMeta kept under key to restore. It reports whether anything was
// restored: false when nothing is saved there, or when it is unreadable or restore refuses it
// (logged as a warning, unreadable its message).
func restoreMeta[T any](s *Service, key string, restore func(T) error, unreadable string) bool {
	raw := s.store.Meta(key)
	if raw == "" {
		return false
	}
	var v T
	err := json.Unmarshal([]byte(raw), &v)
	if err == nil {
		err = restore(v)
	}
	if err != nil {
		s.log.Warn(unreadable, "key", key, "error", err)
		return false
	}
	return true
}
