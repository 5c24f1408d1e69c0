// Package arch holds NVIDIA architecture facts that both the NVML fingerprint and the fake
// backend need, so the two never disagree.
package arch

// CoresPerSM is CUDA cores per SM by compute capability (CUDA programming guide): NVML reports
// cores, Nomad users want SMs, and the fake backend turns SM counts back into cores.
func CoresPerSM(major, minor int) int {
	switch {
	case major == 3:
		return 192
	case major == 6 && minor == 0, major == 7, major == 8 && minor == 0:
		return 64
	default:
		return 128
	}
}
