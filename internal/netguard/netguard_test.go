package netguard

import (
	"net/netip"
	"testing"
)

func TestInternal(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1": true, "10.1.2.3": true, "172.16.0.1": true, "192.168.1.1": true, "169.254.169.254": true,
		"100.64.0.1": true, "0.0.0.0": true, "::1": true, "fe80::1": true, "fd00:ec2::254": true, "::ffff:127.0.0.1": true,
		"93.184.216.34": false, "2606:4700::1": false,
		// IPv4 carried in IPv6: NAT64 (the last 32 bits) and 6to4 (bits 16–47).
		"64:ff9b::a00:1": true, "64:ff9b::a9fe:a9fe": true, "64:ff9b::5db8:d822": false,
		"2002:a00:1::1": true, "2002:7f00:1::": true, "2002:5db8:d822::1": false,
	} {
		ip := netip.MustParseAddr(addr)
		if got := Internal(ip.Unmap()); got != want {
			t.Errorf("Internal(%s) = %v, want %v", addr, got, want)
		}
	}
}
