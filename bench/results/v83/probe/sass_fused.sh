cd /tmp && xz -dc $OLDPWD/.carry/v22/b.tar.xz | tar xf -
for v in p0 w1; do (cuobjdump -sass /tmp/$v/cli | awk '/Function : .*decode_fused/{p=1} /Function : /{if($0 !~ /decode_fused/)p=0} p' | gzip > $OUT/sass_fused_$v.txt.gz; echo "$v done $(zcat $OUT/sass_fused_$v.txt.gz | wc -l)") & done; wait
