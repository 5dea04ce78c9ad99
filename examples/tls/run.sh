#!/usr/bin/env bash
# examples/tls: a client connects to sluice over TLS and checks sluice's certificate; sluice
# connects to MariaDB over TLS and checks the server's. See README.md.
. "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
command -v openssl >/dev/null || die "openssl not found"

step "a throwaway CA, and certificates for sluice and for MariaDB (IP 127.0.0.1)"
CERTS=$WORK/certs
mkdir "$CERTS"
# cert NAME CA: a key and a certificate for 127.0.0.1 signed by CA (NAME.pem, NAME-key.pem).
cert() {
	openssl req -newkey rsa:2048 -nodes -subj "/CN=$1 (sluice example)" \
		-keyout "$CERTS/$1-key.pem" -out "$CERTS/$1.csr" 2>/dev/null
	openssl x509 -req -in "$CERTS/$1.csr" -CA "$CERTS/$2.pem" -CAkey "$CERTS/$2-key.pem" -CAcreateserial \
		-days 1 -extfile <(echo "subjectAltName = IP:127.0.0.1") -out "$CERTS/$1.pem" 2>/dev/null
}
for ca in ca other-ca; do # other-ca signs nothing here: a client trusting only it must refuse sluice
	openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=$ca (sluice example)" \
		-keyout "$CERTS/$ca-key.pem" -out "$CERTS/$ca.pem" 2>/dev/null
done
cert sluice ca
cert mariadb ca
show "$(cd "$CERTS" && echo ./*.pem)"

step "MariaDB with TLS, and sluice with the certificates of sluice.toml"
start_mariadb primary --ssl-ca="$CERTS/ca.pem" --ssl-cert="$CERTS/mariadb.pem" --ssl-key="$CERTS/mariadb-key.pem"
db primary -e "CREATE USER app@'127.0.0.1' IDENTIFIED BY 'app-secret'"
start_sluice

step "client -> sluice over TLS, sluice's certificate verified against the CA"
status=$(sql app app-secret --ssl --ssl-ca="$CERTS/ca.pem" --ssl-verify-server-cert -e status)
show "$(grep -E '^(SSL|Server|Connection):' <<<"$status")"
check_match "the mariadb client's status: the connection is encrypted" '^SSL:[[:space:]]+Cipher in use is ' "$status"
check_error "a client that trusts only another CA refuses sluice's certificate" "ERROR 2026" \
	sql app app-secret --ssl --ssl-ca="$CERTS/other-ca.pem" --ssl-verify-server-cert -e "SELECT 1"
show "$OUTPUT"
status=$(sql app app-secret --skip-ssl -e status)
check_match "TLS is offered, not required: a client may still connect without it" '^SSL:[[:space:]]+Not in use' "$status"

step "sluice -> MariaDB over TLS (use_ssl = 1, ssl_ca)"
# SHOW STATUS goes to the server: it describes sluice's backend connection, whatever the
# client's own connection to sluice is.
out=$(sql app app-secret --skip-ssl -e "SHOW SESSION STATUS LIKE 'Ssl_cipher'")
show "a plain client, through sluice: $out"
check_match "the server reports a cipher on sluice's connection" '^Ssl_cipher	[A-Z0-9_-]+$' "$out"
check "the server counted TLS handshakes from sluice" yes \
	"$(db primary -e "SHOW GLOBAL STATUS LIKE 'Ssl_accepts'" | awk '{ print ($2 > 0) ? "yes" : "no" }')"
