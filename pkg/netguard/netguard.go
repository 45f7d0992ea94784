// Package netguard refuses outgoing connections that a server's users must
// not be able to make it open: a pipeline's var_source names a URL, and the
// server, not the user, connects to it with a token. Loopback (the server's
// own ports, PostgreSQL, MinIO), link-local (a cloud's metadata service at
// 169.254.169.254), unspecified and multicast addresses are refused unless
// the operator allows their networks. The check runs when the connection is
// made, on the address it is made to, so a name that resolves there and a
// redirect that points there are refused too.
package netguard

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"syscall"
)

// Guard decides which addresses may be dialled. The zero Guard refuses
// every refused kind of address and allows the rest.
type Guard struct {
	// Allowed are networks dialled even where their kind is refused (an
	// operator's Vault on 127.0.0.1, say).
	Allowed []netip.Prefix
	// Flag names the setting that allows a network, for error messages.
	Flag string
}

// RefusedError is a connection the Guard refused.
type RefusedError struct {
	Addr netip.Addr
	Kind string // "loopback", "link-local", ...
	Flag string
}

func (e *RefusedError) Error() string {
	msg := fmt.Sprintf("connection to %s refused: it is a %s address", e.Addr, e.Kind)
	if e.Flag != "" {
		msg += fmt.Sprintf(" (allow its network with --%s)", e.Flag)
	}
	return msg
}

// Check returns a *RefusedError for an address g refuses, else nil.
func (g Guard) Check(ip netip.Addr) error {
	ip = ip.Unmap()
	kind := refusedKind(ip)
	if kind == "" {
		return nil
	}
	for _, p := range g.Allowed {
		if p.Contains(ip) {
			return nil
		}
	}
	return &RefusedError{Addr: ip, Kind: kind, Flag: g.Flag}
}

// metadataAddrs are clouds' instance metadata services outside the
// link-local range (Alibaba Cloud's, AWS's over IPv6): they hand out the
// node's credentials to whoever asks from it.
var metadataAddrs = []netip.Addr{netip.MustParseAddr("100.100.100.200"), netip.MustParseAddr("fd00:ec2::254")}

// refusedKind names the kind of a refused address; "" for the rest. Private
// networks (10/8, 172.16/12, 192.168/16, fc00::/7) are not refused: a Vault
// in the cluster is on a cluster IP there, and allowing the whole service
// range to reach it would allow everything in it anyway (the ATC's
// NetworkPolicy is what narrows its egress).
func refusedKind(ip netip.Addr) string {
	switch {
	case slices.Contains(metadataAddrs, ip):
		return "cloud metadata"
	case !ip.IsValid():
		return "invalid"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "link-local"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	}
	return ""
}

// Control is a net.Dialer Control: it checks the address each connection
// is about to be made to, after name resolution.
func (g Guard) Control(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("netguard: address %q: %w", address, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("netguard: address %q is not an IP address: %w", address, err)
	}
	return g.Check(ip)
}

// ParseNetworks reads CIDR networks; a plain address is its own network
// (/32 or /128).
func ParseNetworks(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		for _, part := range strings.Split(s, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			if p, err := netip.ParsePrefix(part); err == nil {
				out = append(out, p.Masked())
				continue
			}
			ip, err := netip.ParseAddr(part)
			if err != nil {
				return nil, fmt.Errorf("network %q: want a CIDR network (127.0.0.1/32) or an address", part)
			}
			out = append(out, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
		}
	}
	return out, nil
}
