set confirm off
break malloc
continue
if $_hit_bpnum == 1
  print 4242
end
delete
detach
