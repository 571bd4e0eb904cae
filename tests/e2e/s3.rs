//! A mesh job whose input and output live on a real S3 endpoint (SeaweedFS, a real S3 server started by .ci/run).
//! In CI a missing endpoint fails the test; locally it is skipped with a message.

use super::harness::*;

fn endpoint() -> Option<String> {
    match std::env::var("KILN_TEST_S3_ENDPOINT") {
        Ok(e) => Some(e),
        Err(_) => {
            assert!(
                std::env::var("CI").is_err(),
                "KILN_TEST_S3_ENDPOINT is not set; .ci/run starts SeaweedFS and sets it"
            );
            eprintln!("SKIP S3 test: KILN_TEST_S3_ENDPOINT not set (run .ci/run)");
            None
        }
    }
}

fn aws(cmd: &mut std::process::Command, endpoint: &str) {
    cmd.env("AWS_ENDPOINT", endpoint)
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env("AWS_DEFAULT_REGION", "us-east-1");
}

fn store(endpoint: &str, bucket: &str) -> object_store::aws::AmazonS3 {
    object_store::aws::AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .with_region("us-east-1")
        .with_bucket_name(bucket)
        .build()
        .unwrap()
}

#[test]
fn mesh_job_reads_and_publishes_through_s3() {
    use object_store::{ObjectStore, ObjectStoreExt, path::Path as ObjectPath};
    let Some(ep) = endpoint() else { return };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let bucket = format!("kiln-e2e-{}", std::process::id());
    // object_store cannot create buckets; the test server accepts an unsigned PUT on the bucket path.
    let o = std::process::Command::new("curl")
        .args(["-sf", "-X", "PUT", &format!("{ep}/{bucket}")])
        .output()
        .unwrap();
    assert!(o.status.success(), "create bucket: {}", stderr(&o));
    let s3 = store(&ep, &bucket);
    let src = dataset("mesh-khronos-gltf-samples").join("Avocado/glTF");
    rt.block_on(async {
        for e in std::fs::read_dir(&src).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let bytes = std::fs::read(e.path()).unwrap();
            s3.put(
                &ObjectPath::from(format!("in/avocado/{name}")),
                bytes.into(),
            )
            .await
            .unwrap();
        }
    });
    let sb = Sandbox::new();
    let job = sb.job(
        "s3",
        &format!("name = \"s3\"\nkind = \"mesh\"\ninput = \"s3://{bucket}/in/avocado/Avocado.gltf\"\noutput = \"s3://{bucket}/out/avocado\"\n"),
    );
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kiln"));
    cmd.args(["run", job.to_str().unwrap()])
        .env("KILN_HOME", sb.path())
        .env("KILN_DB", sb.path().join("ledger.sqlite"))
        .current_dir(sb.path());
    aws(&mut cmd, &ep);
    let o = cmd.output().unwrap();
    ok(&o);
    rt.block_on(async {
        let get = |p: String| {
            let s3 = &s3;
            async move {
                s3.get(&ObjectPath::from(p))
                    .await
                    .unwrap()
                    .bytes()
                    .await
                    .unwrap()
            }
        };
        let m: serde_json::Value =
            serde_json::from_slice(&get("out/avocado/manifest.json".into()).await).unwrap();
        let files = m["files"].as_array().unwrap();
        assert!(files.iter().any(|f| f["path"] == "tileset.json"));
        // Every listed object is there with the listed size and hash.
        for f in files {
            let b = get(format!("out/avocado/{}", f["path"].as_str().unwrap())).await;
            assert_eq!(b.len() as u64, f["bytes"].as_u64().unwrap());
            assert_eq!(
                blake3::hash(&b).to_hex().to_string(),
                f["blake3"].as_str().unwrap()
            );
        }
        // No staging objects remain.
        let listed: Vec<_> =
            futures::TryStreamExt::try_collect::<Vec<_>>(s3.list(Some(&ObjectPath::from("out"))))
                .await
                .unwrap();
        assert!(
            listed
                .iter()
                .all(|m| !m.location.as_ref().contains(".staging-")),
            "{listed:?}"
        );
        assert_eq!(
            listed.len(),
            files.len() + 1,
            "exactly the manifest's files plus manifest.json"
        );
    });
}
