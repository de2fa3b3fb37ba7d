//! The corpus: real-world command lines (as a shell would be given them) and the form of each
//! that rlock may store. Every secret in it holds `S3C`, so that a wrong expectation cannot
//! hide a leak.

use super::command::masked;
use super::shell;

const CORPUS: &[(&str, &str)] = &[
    (
        r#"mysql -u root -pS3C_a1 -h db.internal shop"#,
        r#"mysql -u root -p*** -h db.internal shop"#,
    ),
    (
        r#"mysql --user=admin --password=S3C_a2 shop"#,
        r#"mysql --user=admin --password=*** shop"#,
    ),
    (
        r#"mysql -u root -p S3C_a3 shop"#,
        r#"mysql -u root -p *** shop"#,
    ),
    (
        r#"mysqldump -uroot -pS3C_a4 --all-databases"#,
        r#"mysqldump -uroot -p*** --all-databases"#,
    ),
    (r#"sh -c 'mysql -pS3C_a5 db'"#, r#"sh -c mysql -p*** db"#),
    (
        r#"bash -c "mysql -h db -u app --password 'S3C_a6 15' -e 'select 1'""#,
        r#"bash -c mysql -h db -u app --password *** -e select 1"#,
    ),
    (
        r#"PGPASSWORD=S3C_b1 psql -h db -p 5432 -U app shop"#,
        r#"PGPASSWORD=*** psql -h db -p 5432 -U app shop"#,
    ),
    (
        r#"psql "postgresql://app:S3C_b2@db:5432/shop?sslmode=require""#,
        r#"psql postgresql://app:***@db:5432/shop?sslmode=require"#,
    ),
    (
        r#"psql "host=db user=app password=S3C_b3 dbname=shop""#,
        r#"psql host=db user=app password=*** dbname=shop"#,
    ),
    (
        r#"pg_dump --dbname=postgres://app:S3C_b4@db/shop -Fc -f shop.dump"#,
        r#"pg_dump --dbname=postgres://app:***@db/shop -Fc -f shop.dump"#,
    ),
    (
        r#"curl -u deploy:S3C_c1 https://ci.example/api"#,
        r#"curl -u deploy:*** https://ci.example/api"#,
    ),
    (
        r#"curl --user deploy:S3C_c2 https://ci.example/api"#,
        r#"curl --user deploy:*** https://ci.example/api"#,
    ),
    (
        r#"curl -H 'Authorization: Bearer S3C_c3' https://api.example/v1"#,
        r#"curl -H Authorization: *** https://api.example/v1"#,
    ),
    (
        r#"curl --header "X-Api-Key: S3C_c4" https://api.example/v1"#,
        r#"curl --header X-Api-Key: *** https://api.example/v1"#,
    ),
    (
        r#"curl -H "Cookie: session=S3C_c5" https://app.example/"#,
        r#"curl -H Cookie: *** https://app.example/"#,
    ),
    (
        r#"curl -sSf -H 'Private-Token: S3C_c6' https://gitlab.example/api/v4/projects"#,
        r#"curl -sSf -H Private-Token: *** https://gitlab.example/api/v4/projects"#,
    ),
    (
        r#"curl -d '{"user":"me","password":"S3C_c7"}' https://api.example/login"#,
        r#"curl -d {"user":"me","password":"***"} https://api.example/login"#,
    ),
    (
        r#"curl -d 'user=me&password=S3C_c8' https://api.example/login"#,
        r#"curl -d user=me&password=*** https://api.example/login"#,
    ),
    (
        r#"curl https://me:S3C_c9@files.example/backup.tar"#,
        r#"curl https://me:***@files.example/backup.tar"#,
    ),
    (
        r#"curl --oauth2-bearer S3C_c10 https://api.example"#,
        r#"curl --oauth2-bearer *** https://api.example"#,
    ),
    (
        r#"curl -b session_id=S3C_c11 https://app.example/"#,
        r#"curl -b session_id=*** https://app.example/"#,
    ),
    (
        r#"wget --http-user=me --http-password=S3C_d1 https://files.example/x"#,
        r#"wget --http-user=me --http-password=*** https://files.example/x"#,
    ),
    (
        r#"wget --header='Authorization: token S3C_d2' https://api.example/x"#,
        r#"wget --header=Authorization: *** https://api.example/x"#,
    ),
    (
        r#"wget "https://files.example/x?access_token=S3C_d3&page=2""#,
        r#"wget https://files.example/x?access_token=***"#,
    ),
    (
        r#"git clone https://x-access-token:S3C_e1@github.com/org/repo.git"#,
        r#"git clone https://x-access-token:***@github.com/org/repo.git"#,
    ),
    (
        r#"git clone https://S3C_e2@github.com/org/repo.git"#,
        r#"git clone https://***@github.com/org/repo.git"#,
    ),
    (
        r#"git -c http.extraHeader="Authorization: Basic S3C_e3" fetch origin"#,
        r#"git -c http.extraHeader=Authorization: *** fetch origin"#,
    ),
    (
        r#"git config --global github.token S3C_e4"#,
        r#"git config --global github.token ***"#,
    ),
    (
        r#"git commit -am 'fix login'"#,
        r#"git commit -am fix login"#,
    ),
    (
        r#"docker run -e MYSQL_ROOT_PASSWORD=S3C_f1 -p 3306:3306 mysql:8"#,
        r#"docker run -e MYSQL_ROOT_PASSWORD=*** -p *** mysql:8"#,
    ),
    (
        r#"docker run --env=MYSQL_ROOT_PASSWORD=S3C_f2 mysql:8"#,
        r#"docker run --env=MYSQL_ROOT_PASSWORD=*** mysql:8"#,
    ),
    (
        r#"docker login -u me -p S3C_f3 registry.example"#,
        r#"docker login -u me -p *** registry.example"#,
    ),
    (
        r#"docker login -u me --password S3C_f4 registry.example"#,
        r#"docker login -u me --password *** registry.example"#,
    ),
    (
        r#"docker build --build-arg NPM_TOKEN=S3C_f5 -t app ."#,
        r#"docker build --build-arg NPM_TOKEN=*** -t app ."#,
    ),
    (
        r#"kubectl --token=S3C_g1 get pods"#,
        r#"kubectl --token=*** get pods"#,
    ),
    (
        r#"kubectl create secret generic db --from-literal=password=S3C_g2"#,
        r#"kubectl create secret *** db --from-literal=password=***"#,
    ),
    (
        r#"kubectl config set-credentials ci --token S3C_g3"#,
        r#"kubectl config set-credentials *** --token ***"#,
    ),
    (
        r#"kubectl exec -it web -- sh -c 'PGPASSWORD=S3C_g4 psql -U app'"#,
        r#"kubectl exec -it web -- sh -c PGPASSWORD=*** psql -U app"#,
    ),
    (
        r#"helm upgrade app chart --set db.password=S3C_h1"#,
        r#"helm upgrade app chart --set db.password=***"#,
    ),
    (
        r#"helm install app chart --set db.user=app,db.password=S3C_h2,db.port=5432"#,
        r#"helm install app chart --set db.user=app,db.password=***"#,
    ),
    (
        r#"helm install app chart --set-string auth.rootPassword=S3C_h3"#,
        r#"helm install app chart --set-string auth.rootPassword=***"#,
    ),
    (
        r#"aws configure set aws_secret_access_key S3C_i1"#,
        r#"aws configure set aws_secret_access_key ***"#,
    ),
    (
        r#"AWS_SECRET_ACCESS_KEY=S3C_i2 AWS_ACCESS_KEY_ID=AKIA aws s3 ls"#,
        r#"AWS_SECRET_ACCESS_KEY=*** AWS_ACCESS_KEY_ID=*** aws s3 ls"#,
    ),
    (
        r#"aws s3 cp s3://bucket/x . --sse-c-key S3C_i3"#,
        r#"aws s3 cp s3://bucket/x . --sse-c-key ***"#,
    ),
    (
        r#"gcloud auth activate-service-account --key-file=/etc/key.json"#,
        r#"gcloud auth *** --key-file=***"#,
    ),
    (
        r#"gcloud sql users set-password app --instance=db --password=S3C_j1"#,
        r#"gcloud sql users set-password *** --instance=db --password=***"#,
    ),
    (
        r#"az login --service-principal -u app-id -p S3C_k1 --tenant t"#,
        r#"az login --service-principal -u app-id -p *** --tenant t"#,
    ),
    (
        r#"az storage blob upload --account-key S3C_k2 -f x -c c"#,
        r#"az storage blob upload --account-key *** -f x -c c"#,
    ),
    (
        r#"sshpass -pS3C_l1 ssh deploy@host uptime"#,
        r#"sshpass -p*** ssh deploy@host uptime"#,
    ),
    (
        r#"sshpass -p S3C_l2 scp -P 2222 x deploy@host:/tmp"#,
        r#"sshpass -p *** scp -P *** x deploy@host:/tmp"#,
    ),
    (
        r#"ssh -p 2222 deploy@host 'mysql -pS3C_l3 shop'"#,
        r#"ssh -p 2222 deploy@host mysql -p*** shop"#,
    ),
    (
        r#"redis-cli -a S3C_m1 -h cache ping"#,
        r#"redis-cli -a *** -h cache ping"#,
    ),
    (r#"redis-cli -aS3C_m2 ping"#, r#"redis-cli -a*** ping"#),
    (
        r#"redis-cli -u redis://default:S3C_m3@cache:6379/0 ping"#,
        r#"redis-cli -u redis://default:***@cache:6379/0 ping"#,
    ),
    (r#"redis-cli AUTH S3C_m4"#, r#"redis-cli AUTH ***"#),
    (
        r#"redis-cli --pass S3C_m5 --no-auth-warning ping"#,
        r#"redis-cli --pass *** --no-auth-warning ping"#,
    ),
    (
        r#"mongo --username app --password S3C_n1 shop"#,
        r#"mongo --username app --password *** shop"#,
    ),
    (
        r#"mongosh "mongodb+srv://app:S3C_n2@cluster0.example.net/shop""#,
        r#"mongosh mongodb+srv://app:***@cluster0.example.net/shop"#,
    ),
    (
        r#"mongodump --uri=mongodb://app:S3C_n3@db/shop --out /backup"#,
        r#"mongodump --uri=mongodb://app:***@db/shop --out /backup"#,
    ),
    (
        r#"ansible-playbook site.yml --extra-vars "db_password=S3C_o1 env=prod""#,
        r#"ansible-playbook site.yml --extra-vars db_password=***"#,
    ),
    (
        r#"ansible-playbook site.yml -e '{"vault_token": "S3C_o2"}'"#,
        r#"ansible-playbook site.yml -e {vault_token:***}"#,
    ),
    (
        r#"ansible-playbook site.yml -e ansible_become_pass=S3C_o3 --vault-password-file ~/.vp"#,
        r#"ansible-playbook site.yml -e ansible_become_pass=*** --vault-password-file ***"#,
    ),
    (
        r#"terraform apply -var 'db_password=S3C_p1' -auto-approve"#,
        r#"terraform apply -var db_password=*** -auto-approve"#,
    ),
    (
        r#"terraform apply -var=api_token=S3C_p2"#,
        r#"terraform apply -var=api_token=***"#,
    ),
    (
        r#"TF_VAR_db_password=S3C_p3 terraform plan"#,
        r#"TF_VAR_db_password=*** terraform plan"#,
    ),
    (
        r#"env GITHUB_PAT=S3C_q1 ./release.sh"#,
        r#"env GITHUB_PAT=*** ./release.sh"#,
    ),
    (
        r#"export API_KEY=S3C_q2; ./deploy.sh"#,
        r#"export API_KEY=*** ; ./deploy.sh"#,
    ),
    (
        r#"sh -c 'export DB_PASS=S3C_q3 && ./migrate'"#,
        r#"sh -c export DB_PASS=*** && ./migrate"#,
    ),
    (r#"app -aS3C_q4"#, r#"app -a***"#),
    (
        r#"deploy --client-secret=S3C_q5 --region eu"#,
        r#"deploy --client-secret=*** --region eu"#,
    ),
    (
        r#"java -Djavax.net.ssl.keyStorePassword=S3C_r1 -jar app.jar"#,
        r#"java -Djavax.net.ssl.keyStorePassword=*** -jar app.jar"#,
    ),
    (
        r#"keytool -importcert -storepass S3C_r2 -file ca.pem"#,
        r#"keytool -importcert -storepass *** -file ca.pem"#,
    ),
    (
        r#"openssl pkcs12 -export -passout pass:S3C_r3 -out x.p12"#,
        r#"openssl pkcs12 -export -passout *** -out x.p12"#,
    ),
    (
        r#"unzip -P S3C_r4 backup.zip"#,
        r#"unzip -P *** backup.zip"#,
    ),
    (r#"mkdir -p /var/backups/db"#, r#"mkdir -p /var/backups/db"#),
    (
        r#"rsync -a /src/ host:/dst/"#,
        r#"rsync -a /src/ host:/dst/"#,
    ),
    (
        r#"tar -xzf backup.tar.gz -C /restore"#,
        r#"tar -xzf backup.tar.gz -C /restore"#,
    ),
    (r#"ls -la /tmp"#, r#"ls -la /tmp"#),
    (
        r#"rlock exec --key nightly -- ./backup.sh"#,
        r#"rlock exec --key nightly -- ./backup.sh"#,
    ),
    (
        r#"rlock acquire --key=jobs -w 5s"#,
        r#"rlock acquire --key=jobs -w 5s"#,
    ),
    (
        r#"rlock exec -k db -- mysql -pS3C_s1 -e 'flush tables'"#,
        r#"rlock exec -k db -- mysql -p*** -e flush tables"#,
    ),
    (
        r#"./backup.sh --target s3://bucket/db"#,
        r#"./backup.sh --target s3://bucket/db"#,
    ),
    (
        r#"env api_key=S3C_t1 GITHUB_TOKEN=S3C_t2 X=1 ./job"#,
        r#"env api_key=*** GITHUB_TOKEN=*** X=1 ./job"#,
    ),
    (
        r#"deploy --password S3C_t3 --to prod"#,
        r#"deploy --password *** --to prod"#,
    ),
    (r#"deploy --token=S3C_t4"#, r#"deploy --token=***"#),
    (
        r#"x --api-key S3C_t5 --client-secret=S3C_t6"#,
        r#"x --api-key *** --client-secret=***"#,
    ),
    (r#"rlock --key jobs -k x"#, r#"rlock --key jobs -k x"#),
    (
        r#"curl redis://u:S3C_t8@h:1/0"#,
        r#"curl redis://u:***@h:1/0"#,
    ),
    (
        r#"sh -c "curl -d '{\"password\": \"S3C_t9\"}' https://x""#,
        r#"sh -c curl -d {password:***} https://x"#,
    ),
    (
        r#"vault login -method=userpass username=me password=S3C_u1"#,
        r#"vault login -method=userpass username=me password=***"#,
    ),
    (
        r#"heroku config:set STRIPE_SECRET=S3C_u2 -a shop"#,
        r#"heroku config:set STRIPE_SECRET=*** -a ***"#,
    ),
    (
        r#"npm config set //registry.npmjs.org/:_authToken S3C_u3"#,
        r#"npm config set //registry.npmjs.org/:_authToken ***"#,
    ),
    (
        r#"gh auth login --with-token S3C_u4"#,
        r#"gh auth *** --with-token ***"#,
    ),
    (
        r#"docker login --password-stdin -u me registry.example"#,
        r#"docker login --password-stdin -u me registry.example"#,
    ),
    (
        r#"git push https://oauth2:S3C_u5@gitlab.example/g/r.git main"#,
        r#"git push https://oauth2:***@gitlab.example/g/r.git main"#,
    ),
    (
        r#"psql postgres://app:S3C/u6@db/shop"#,
        r#"psql postgres://app:***@db/shop"#,
    ),
    (
        r#"DATABASE_URL=postgres://app:S3C_u7@db/shop ./migrate"#,
        r#"DATABASE_URL=postgres://app:***@db/shop ./migrate"#,
    ),
];

#[test]
fn the_corpus_is_masked_as_expected() {
    assert!(CORPUS.len() >= 60, "{}", CORPUS.len());
    for (line, want) in CORPUS {
        let got = masked(&shell::words(line));
        assert!(!got.contains("S3C"), "{line}\n  leaks: {got}");
        assert_eq!(got, *want, "{line}");
    }
}

/// The forms that reached Redis in clear before masking read every letter of a cluster, the
/// command after `ssh`, `docker exec` and `kubectl exec`, and a few programs' own syntax.
const FIFTH: &[&str] = &[
    "curl -su user:S3C https://h",
    "curl -sSfu user:S3C https://h",
    "curl -U proxy:S3C https://h",
    "curl --cert f.pem:S3C https://h",
    "curl --proxy-user u:S3C https://h",
    "docker exec redis redis-cli -a S3C ping",
    "docker exec -it -u root -e X=1 redis redis-cli -a S3C ping",
    "docker exec -w /tmp redis mysql -pS3C",
    "podman exec c mysql -pS3C",
    "kubectl exec -it pod -- redis-cli -a S3C ping",
    "kubectl exec -n ns pod -c c -- redis-cli -aS3C",
    "kubectl exec pod redis-cli -a S3C",
    "ssh db1 mysql -pS3C",
    "ssh -p 22 -i k db1 mysql -pS3C",
    "ssh -p2222 db1 'mysql -pS3C db'",
    "ssh -o StrictHostKeyChecking=no db1 redis-cli -a S3C",
    "redis-cli AUTH user S3C",
    "redis-cli -h h AUTH S3C",
    "valkey-cli auth S3C",
    "sh -c 'x' sh redis-cli AUTH user S3C",
    "sh -c 'x' sh openssl enc -k S3C -in f",
    "sh -c 'x' sh ldapsearch -w S3C",
    "sh -c 'x' sh htpasswd -b f u S3C",
    "sh -c 'x' sh sqlplus scott/S3C@db",
    "xargs openssl enc -kS3C",
    "mysql -e \"ALTER USER x IDENTIFIED BY 'S3C'\"",
    "mysql -e \"CREATE USER 'a'@'%' IDENTIFIED BY 'S3C'\"",
    "openssl enc -k S3C -in f",
    "openssl enc -aes256 -kS3C -in f",
    "htpasswd -b f u S3C",
    "htpasswd -bc f u S3C",
    "ldapsearch -x -w S3C -D cn=admin",
    "ldapsearch -xwS3C",
    "ldapmodify -w S3C -f x.ldif",
    "smbclient -U u%S3C //h/s",
    "smbclient //h/s -U u%S3C",
    "lftp -u u,S3C h",
    "sqlplus scott/S3C@db",
    "sqlplus -s scott/S3C",
    "expdp scott/S3C@db directory=d",
    "app '--password S3C'",
    "app '-p S3C'",
    "env DB=1 mysql -pS3C",
    "env -i mysql -pS3C",
    "sudo -u postgres mysql -pS3C",
    "sudo env X=1 mysql -pS3C",
    "sh -c \"ssh db1 mysql -pS3C\"",
    "bash -c 'docker exec c redis-cli -a S3C'",
    "nohup ssh db1 'redis-cli -a S3C' &",
    "time ssh db1 mysql -pS3C",
    "mysql -hdb -uroot -pS3C",
    "mysqladmin -uroot -pS3C status",
];

#[test]
fn the_forms_that_leaked_are_masked() {
    for line in FIFTH {
        let got = masked(&shell::words(line));
        assert!(!got.contains("S3C"), "{line}\n  leaks: {got}");
    }
}

#[test]
fn blanks_inside_a_shell_word_split_as_the_shell_splits_them() {
    let got = masked(&["sh", "-c", "deploy --password\t'S3C 15'\n --to prod"]);
    assert_eq!(got, "sh -c deploy --password *** --to prod");
}

#[test]
fn nesting_too_deep_is_masked_whole() {
    let mut line = "mysql -pS3C".to_string();
    for _ in 0..10 {
        line = format!("sh -c '{}'", line.replace('\'', r"'\''"));
    }
    let got = masked(&["sh", "-c", &line]);
    assert!(!got.contains("S3C"), "{got}");
}

#[test]
fn any_bytes_are_masked_without_a_panic_and_known_forms_never_leak() {
    let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
    for _ in 0..20_000 {
        let words: Vec<String> = (0..next() % 6)
            .map(|_| {
                (0..next() % 8)
                    .map(|_| PIECES[(next() % PIECES.len() as u64) as usize])
                    .collect()
            })
            .collect();
        // Whatever comes before, a secret in a known form after it is masked.
        for form in FORMS {
            let mut line = words.clone();
            line.extend(form.iter().map(|w| w.to_string()));
            let got = masked(&line);
            assert!(!got.contains("S3C"), "{line:?}\n  leaks: {got}");
        }
    }
}

/// What the random lines of the test above are made of. Programs known to mean something
/// harmless by -p (mkdir) are left out: their -p is kept.
const PIECES: [&str; 36] = [
    "-p",
    "--password",
    "=",
    "'",
    "\"",
    " ",
    "\t",
    "é",
    "://",
    "@",
    ":",
    "sh",
    "-c",
    "\\",
    "$'",
    "{",
    "}",
    ",",
    "-u",
    "Authorization",
    "x",
    "TOKEN",
    ";",
    "\u{1b}",
    "--",
    "|",
    "&&",
    "(",
    "-e",
    "--set",
    "export",
    "sudo",
    "env",
    "rlock",
    "--key",
    "\n",
];

/// A secret in each of the forms known to hold one.
const FORMS: [&[&str]; 10] = [
    &["--password", "S3C"],
    &["-pS3C", "x"],
    &["-u", "me:S3C"],
    &["-aS3C"],
    &["--env=MYSQL_ROOT_PASSWORD=S3C"],
    &["-H", "Authorization: Bearer S3C"],
    &["https://u:S3C@h/x"],
    &["sh", "-c", "mysql -pS3C db"],
    &["GITHUB_PAT=S3C"],
    &["--set", "db.password=S3C"],
];

/// A xorshift generator from `seed`: the same numbers on every run.
fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    }
}
