package contextd

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/contextd/api"
	"github.com/theseus-ccl/theseus/contextd/client"
)

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T, dir string) (cert, key string) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "theseus-contextd test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(k)
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	return cert, key
}

// TestTCPNeedsTLSAndToken: the TCP API serves only TLS, and only with the
// token; a TCP API without TLS or a token is refused at start.
func TestTCPNeedsTLSAndToken(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte("0123456789abcdef0123\n"), 0o600)
	cfg := single(t, dir)
	cfg.Socket = "none"
	if _, err := Start(Config{DataDir: cfg.DataDir, ContextsDir: cfg.ContextsDir, Listen: "127.0.0.1:0", TokenFile: tokenFile}); err == nil {
		t.Fatal("a TCP API without TLS started")
	}
	cfg.Listen, cfg.TLSCert, cfg.TLSKey, cfg.TokenFile = "127.0.0.1:0", cert, key, tokenFile
	d := start(t, cfg)
	addr := "https://" + d.TCPAddr()
	ctx := context.Background()
	good, err := client.New(client.Options{Addr: addr, Token: "0123456789abcdef0123", CAFile: cert})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := good.Attr(ctx, "default", api.AttrRequest{Name: "x", Origin: "exo", Type: "int"}); err != nil {
		t.Fatal(err)
	}
	bad, _ := client.New(client.Options{Addr: addr, Token: "wrong-token-wrong-token", CAFile: cert})
	_, err = bad.Value(ctx, "default", api.ValueRequest{Name: "x", Value: "1"})
	var e *api.Error
	if !errors.As(err, &e) || e.Reason != api.ReasonUnauthorized {
		t.Fatalf("wrong token: %v", err)
	}
	if _, err := client.New(client.Options{Addr: "http://" + d.TCPAddr(), Token: "x"}); err == nil {
		t.Fatal("the client accepted a plain-HTTP address")
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "api.sock")); err == nil {
		t.Fatal("--socket none served a socket")
	}
}
