package memkv

// Len is how many items the store holds, expired ones not yet dropped included.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.items)
}
